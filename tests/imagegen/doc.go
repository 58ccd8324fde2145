// Command imagegen writes a deterministic OCI image layout (image-spec 1.0:
// oci-layout, index.json and blobs/sha256/...) for use as a test fixture by
// the pullhelper system tests under tests/*.bats.
//
// Everything in the output is a pure function of the flags: the same flags
// and -seed produce a byte-identical layout, and a different -seed changes
// every layer, config and manifest digest. Each layer is a tar archive (fixed
// mtime 2000-01-01T00:00:00Z, uid/gid 0, mode 0644) holding one file,
// layer-K/data.bin, whose payload is -layer-size bytes: a -compressible
// fraction of highly compressible text, the rest pseudo-random bytes from a
// math/rand/v2 ChaCha8 source seeded from -seed, the platform and the layer
// index. Layers are gzip-compressed with a deterministic header (no name, no
// mtime) and stored as application/vnd.oci.image.layer.v1.tar+gzip; the image
// config (application/vnd.oci.image.config.v1+json) carries the matching
// rootfs.diff_ids and the platform's os/architecture/variant.
//
// With a single platform (the default, linux/amd64) the tagged manifest in
// index.json is a plain OCI image manifest. With -platforms listing more than
// one platform it is an OCI image index with one image manifest per platform,
// each with distinct content and with platform set on its descriptor. The tag
// is stored as the org.opencontainers.image.ref.name annotation, so the
// result can be read as oci:DIR:TAG by skopeo and containers/image.
//
// -file HOST:PATH and -symlink PATH=TARGET (both repeatable) add one more
// layer, the last and the same for every platform, holding the host files
// (their permission bits, the fixed mtime, uid/gid 0; parent directories
// 0755) and the symlinks, in flag order; -cmd '["sh","-c","..."]' sets the
// config's Cmd (default ["/bin/true"]). The output then also depends on the
// host files' contents: the tests name such a fixture after their digest.
//
// Layers are generated concurrently and streamed to disk while being hashed,
// so a ~100 MB image takes a few seconds. On success imagegen prints the
// digest of the tagged manifest (or index) on standard output.
//
// Usage:
//
//	imagegen -out DIR [-tag latest] [-layers 1] [-layer-size 4096]
//	         [-compressible 0.5] [-seed 1] [-platforms linux/amd64,...]
//	         [-file HOST:PATH]... [-symlink PATH=TARGET]... [-cmd JSON]
//
// DIR is created and must not exist or be empty.
package main
