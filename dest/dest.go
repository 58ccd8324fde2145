package dest

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/pullhelper/pullhelper/api"
	"github.com/pullhelper/pullhelper/dest/target"
	"github.com/pullhelper/pullhelper/internal/failure"
	"github.com/pullhelper/pullhelper/internal/safefs"
	"github.com/pullhelper/pullhelper/internal/wire"
)

// Spec is DEST split into its transport and path (target.Spec: the copy
// is handed it too, without DEST's path).
type Spec = target.Spec

// StoreSpec is a containers-storage store as DEST and storage.conf name it.
type StoreSpec = target.StoreSpec

// HiddenPath stands for DEST's path in a Spec sent to the copy.
const HiddenPath = target.HiddenPath

// Destination is one kind of DEST. Stage, Verify and Commit run in the root
// parent; where the copy writes is target.StagedReference, in the child (or
// the parent itself with --no-isolation), which never links this package.
type Destination interface {
	// Spec returns the parsed DEST.
	Spec() Spec
	// String is transport:ABS[:ref].
	String() string
	// Stage checks DEST before any network byte and creates the staging
	// area with the descriptors the parent holds. Errors are
	// failure.Destination.
	Stage(o StageOptions) (*Stage, error)
	// Verify takes the work directory back and checks the staged image
	// against e. Call it only after every process of the pull is dead.
	// Errors are failure.Verification (failure.Destination for I/O on
	// DEST's filesystem). ctx is the pull's (its --timeout deadline, and
	// cancelled by SIGINT/SIGTERM): hashing stops between blobs once it
	// is done.
	Verify(ctx context.Context, st *Stage, e Expect) error
	// Commit moves exactly the verified files into DEST, atomically.
	// Errors are failure.Destination; DEST is unchanged unless it returns
	// nil (an oci: merge may leave blobs no index names). The store
	// imports (containerd:, containers-storage:) honour ctx: once it is
	// done they stop, and what they clean up after is bounded in time
	// (the error is then failure.Interrupted, or the deadline's cause).
	Commit(ctx context.Context, st *Stage) error
}

// Identity is a uid/gid pair.
type Identity = safefs.Owner

// KnownBlob is a blob DEST already has (target.KnownBlob).
type KnownBlob = target.KnownBlob

// Bounds of the known blobs' bytes handed to the copy.
const (
	KnownDataMax   = target.KnownDataMax
	KnownDataTotal = target.KnownDataTotal
)

// withData fills in Data of the known blobs up to the bounds, from read
// (which returns the blob's bytes, or an error to leave it out); a blob
// whose bytes do not match its digest is left out.
func withData(known []KnownBlob, read func(KnownBlob) ([]byte, error)) {
	var total int64
	for i := range known {
		k := &known[i]
		if k.Size <= 0 || k.Size > KnownDataMax || total+k.Size > KnownDataTotal {
			continue
		}
		d, err := digest.Parse(k.Digest)
		if err != nil {
			continue
		}
		b, err := read(*k)
		if err != nil || int64(len(b)) != k.Size || d.Algorithm().FromBytes(b) != d {
			continue
		}
		k.Data = b
		total += k.Size
	}
}

// StageOptions say how the copy will run.
type StageOptions struct {
	// HandTo is the identity the copy runs as: the work directory becomes
	// its own (0700). Nil: the copy runs in this process, no handover.
	HandTo *Identity
	// FreshCopy: the uid is shared with other processes (--user NAME|UID),
	// which may hold descriptors on staged files; every committed file is
	// then a fresh root-created copy, hashed while copying.
	FreshCopy bool
	// AllowOtherOwner accepts a DEST (or DEST's parent) owned by a user
	// other than root and the caller (policy opt-in). Default: refused.
	AllowOtherOwner bool
	// LockTimeout bounds the wait for the commit lock (0: LockTimeout).
	LockTimeout time.Duration
	// Locks is the directory of the commit locks (state.Root.Locks:
	// root's, created 0700 when missing).
	Locks string
	// Ctx ends Stage's waits early (a store another process holds locked,
	// containerd's socket): SIGINT, SIGTERM, the --timeout deadline. Nil:
	// context.Background().
	Ctx context.Context
	// MaxBytes is the image's size limit: what the partial-blob cache
	// keeps, in all (0: 64 GiB).
	MaxBytes int64
	// Log receives warnings (reclaimed staging, dropped files). Nil
	// discards.
	Log *slog.Logger
}

func (o StageOptions) ctx() context.Context {
	if o.Ctx == nil {
		return context.Background()
	}
	return o.Ctx
}

// Expect is what the copy reported, checked by Verify.
type Expect struct {
	// Digest is the top-level manifest digest the copy reported.
	Digest string `json:"digest"`
	// Pinned is the digest of IMAGE@sha256:… ("" for a tag); it must
	// equal Digest.
	Pinned string `json:"pinned,omitempty"`
	// Instance is the per-platform manifest digest when Digest is an
	// index or list ("" otherwise, or when every instance was copied).
	Instance string `json:"instance,omitempty"`
	// IndexRaw is the raw top-level index when Digest is one: its sha256
	// must be Digest and Instance must be one of its manifests.
	IndexRaw []byte `json:"index_raw,omitempty"`
	// DestDigest is the stored manifest's digest when the destination
	// converted it (docker-archive writes Docker schema 2).
	DestDigest string `json:"dest_digest,omitempty"`
	// Manifest is the manifest the copy stored (copy.Image's return
	// value). docker-archive needs it: its archive holds no manifest, so
	// the parent ties the archive's config and layers to the digest
	// through these bytes.
	Manifest []byte `json:"manifest,omitempty"`
	// Served is the manifest the registry served for the reported digest
	// (Instance when set, else Digest): it must hash to that digest, and
	// a stored manifest that differs (DestDigest: a converted one) must
	// keep its config and its layers (the same blobs, or their
	// uncompressed forms named by the config's diff_ids). Without it the
	// stored manifest is tied to nothing the parent can check.
	Served []byte `json:"served,omitempty"`
	// MaxBytes caps the sum of the image's blob sizes (0: no cap).
	MaxBytes int64 `json:"max_bytes,omitempty"`
	// Platform is the platform whose instance of an index the pull
	// copies (nil: this machine's): Instance must be the one
	// containers/image's ChooseInstance picks for it from IndexRaw, and a
	// store DEST imports or unpacks that platform's image.
	Platform *wire.Platform `json:"platform,omitempty"`
	// AllArchitectures is the plan's --all-architectures: only then may
	// the stored top be an index (without it the copy stores one
	// instance, and Instance names it).
	AllArchitectures bool `json:"all_architectures,omitempty"`
	// ServedInstances, with --all-architectures of an index that the
	// staging converted (DestDigest: an oci: layout stores a Docker
	// manifest list and Docker schema 2 instances as OCI, and marks an
	// OCI index's zstd instances), are the
	// registry's instance manifests, in the order of IndexRaw's
	// manifests: each must hash to its descriptor there, and the staged
	// index's instance in the same place must keep its config and
	// layers, as Served for one converted manifest. A store keeps these
	// bytes, as containerd's and containers/image's own pulls do.
	ServedInstances [][]byte `json:"served_instances,omitempty"`
	// ServedConfigs are the registry's configs of the Docker schema 2
	// manifests the staging stored as OCI (Served, or ServedInstances')
	// whose stored config has another digest: containers/image re-encodes
	// each as an OCI config, and the stored config must be that
	// re-encoding of the one here hashing to the served manifest's config
	// digest. A store keeps these.
	ServedConfigs [][]byte `json:"served_configs,omitempty"`

	cfgs *configIndex // ServedConfigs by digest, shared by an index's instances (instanceExpects)
}

// kind builds one transport's Destination: its name, form and split are
// target.Kinds' entry, what the parent does with it is here. Each kind's
// file registers it.
type kind struct {
	// parse, when set, parses the rest itself (containers-storage:'s
	// [STORE]REF form) into a Destination.
	parse func(raw, rest string, o ParseOptions) (Destination, error)
	// new builds it from a Spec whose Path is the rest made absolute
	// (containerd: takes its REF from Spec.Raw and its path from its
	// staging setting instead).
	new func(Spec) (Destination, error)
}

// ParseOptions are settings a destination's parse may need.
type ParseOptions struct {
	// StorageConf is the storage.conf of a containers-storage: DEST
	// ([dest] storage_conf; "": the system's, /etc/containers/storage.conf).
	StorageConf string
}

var kinds = map[string]kind{}

// register adds the parent's side of target's kind name.
func register(name string, k kind) {
	if _, ok := target.Lookup(name); !ok {
		panic("dest: kind " + name + " is not in target.Kinds")
	}
	kinds[name] = k
}

// Parse splits DEST (one of target.Forms: oci:PATH[:TAG], dir:PATH,
// oci-archive:PATH[:TAG], docker-archive:PATH[:REF],
// containers-storage:[DRIVER@GRAPHROOT+RUNROOT]REF, containerd:REF), makes
// PATH absolute and validates the reference. Errors are failure.Usage.
func Parse(raw string) (Destination, error) { return ParseWith(raw, ParseOptions{}) }

// ParseWith is Parse with the settings o.
func ParseWith(raw string, o ParseOptions) (Destination, error) {
	tr, rest, ok := strings.Cut(raw, ":")
	tk, _ := target.Lookup(tr)
	k, known := kinds[tr]
	if !ok || !known {
		return nil, failure.New(failure.Usage, "destination %q: unknown transport %q; use one of %s", raw, tr, target.Forms())
	}
	if k.parse != nil {
		d, err := k.parse(raw, rest, o)
		if err != nil {
			return nil, failure.Wrap(failure.Usage, err, "destination %q", raw)
		}
		return d, nil
	}
	s := Spec{Raw: raw, Transport: tr, Path: rest}
	if tk.Split {
		s.Path, s.Ref, _ = strings.Cut(rest, ":")
	}
	if s.Path == "" {
		return nil, failure.New(failure.Usage, "destination %q: the path is empty", raw)
	}
	abs, err := filepath.Abs(s.Path)
	if err != nil {
		return nil, failure.Wrap(failure.Usage, err, "destination %q", raw)
	}
	s.Path = abs
	if s.Path == "/" {
		return nil, failure.New(failure.Usage, "destination %q: the path cannot be /", raw)
	}
	d, err := k.new(s)
	if err != nil {
		return nil, failure.Wrap(failure.Usage, err, "destination %q", raw)
	}
	return d, nil
}

// base carries what every kind shares.
type base struct{ spec Spec }

func (b base) Spec() Spec     { return b.spec }
func (b base) String() string { return b.spec.String() }

func (b base) destErr(format string, args ...any) error {
	return failure.New(failure.Destination, "destination %s: %s", b.spec.Raw, fmt.Sprintf(format, args...))
}

// destWrap is destErr with err as the cause, kept in the chain.
func (b base) destWrap(err error, format string, args ...any) error {
	return failure.Wrap(failure.Destination, err, "destination %s: %s", b.spec.Raw, fmt.Sprintf(format, args...))
}

func (b base) commitErr(err error) error {
	if err == nil {
		return nil
	}
	if failure.CodeOf(err) != failure.Internal {
		return err
	}
	return failure.Wrap(failure.Destination, err, "committing into %s", b.spec.Raw)
}

func badStaged(format string, args ...any) error {
	return failure.New(failure.Verification, "refusing the staged image: "+format, args...)
}

func discard(l *slog.Logger) *slog.Logger {
	if l == nil {
		return slog.New(slog.DiscardHandler)
	}
	return l
}

// StoreReport is what a store destination (containerd:, containers-storage:) reports after
// Commit: the image ID as the runtime sees it (its config digest) and the
// store it went to, with the image's names there, as the result shows it.
type StoreReport struct {
	ImageID string
	Store   api.Store
}

// Reporter is a Destination that reports where its Commit went.
type Reporter interface {
	Committed() *StoreReport
}
