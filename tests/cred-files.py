#!/usr/bin/python3
"""Write credential files for the pullhelper system tests (080-credentials).

    cred-files.py FORMAT DST [options]

The password is read from a file (default $REGISTRY_DIR/password) and only
ever written into DST (created with mode 0600); it is never printed and
never passed in argv. FORMAT is one of:

  dockerconfigjson   raw .dockerconfigjson  {"auths": {KEY: {"auth": ...}}}
                     (--userpass: "username"/"password" fields instead)
  dockercfg          raw legacy .dockercfg  {KEY: {"auth": ..., "email": ...}}
  secret-yaml        Secret manifest (YAML), type kubernetes.io/dockerconfigjson,
                     data .dockerconfigjson (base64)
  secret-json-dockercfg
                     Secret manifest (JSON), type kubernetes.io/dockercfg,
                     data .dockercfg (base64)
  authjson           containers auth.json {"auths": {KEY: {"auth": ...}}}
  token              the bare password (a service-account token file)
  containerd         containerd config.toml (version = 2, containerd 1.x):
                     CRI registry.configs."KEY".auth username/password
                     (unless --no-auth) and .tls ca_file (--ca); with
                     --state-dir the daemon settings too (root, state,
                     sockets, native snapshotter) and --https-endpoint.
                     --version 3: the same for containerd 2.x (its CRI split
                     into io.containerd.cri.v1.images, the registry and the
                     snapshotter, and io.containerd.cri.v1.runtime)

Options:
  --key KEY            registry key (default $REGISTRY_HOST)
  --user USER          username (default $REGISTRY_USER)
  --password-file F    password source (default $REGISTRY_DIR/password)
  --wrong              use "wrong-" + the password (the registry refuses it)
  --userpass           dockerconfigjson: username/password fields, no auth
  --ca FILE            containerd: tls.ca_file
  --no-auth            containerd: no auth table
  --state-dir DIR      containerd: daemon settings below DIR
  --version N          containerd: the config version, 2 (default, containerd
                       1.x) or 3 (containerd 2.x)
  --https-endpoint     containerd: registry.mirrors."KEY".endpoint =
                       ["https://KEY"]. containerd (CRI, without config_path)
                       reaches a loopback registry over plain http unless an
                       endpoint says https; the test registry speaks TLS only
"""

import argparse
import base64
import json
import os
import sys


def q(s):
    """A TOML basic string (JSON escaping is a subset TOML accepts)."""
    return json.dumps(s)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("format")
    ap.add_argument("dst")
    ap.add_argument("--key", default=os.environ.get("REGISTRY_HOST"))
    ap.add_argument("--user", default=os.environ.get("REGISTRY_USER"))
    ap.add_argument("--password-file",
                    default=os.path.join(os.environ.get("REGISTRY_DIR", ""), "password"))
    ap.add_argument("--wrong", action="store_true")
    ap.add_argument("--userpass", action="store_true")
    ap.add_argument("--ca")
    ap.add_argument("--no-auth", action="store_true")
    ap.add_argument("--state-dir")
    ap.add_argument("--https-endpoint", action="store_true")
    ap.add_argument("--version", type=int, choices=(2, 3), default=2)
    a = ap.parse_args()
    if not a.key or not a.user:
        sys.exit("cred-files.py: no --key/--user (and no REGISTRY_HOST/REGISTRY_USER)")

    with open(a.password_file) as f:
        pw = f.readline().strip()
    if not pw:
        sys.exit("cred-files.py: empty password file %s" % a.password_file)
    if a.wrong:
        pw = "wrong-" + pw
    auth = base64.b64encode(("%s:%s" % (a.user, pw)).encode()).decode()
    b64 = lambda s: base64.b64encode(s.encode()).decode()

    fmt = a.format
    if fmt == "dockerconfigjson":
        entry = {"username": a.user, "password": pw} if a.userpass else {"auth": auth}
        out = json.dumps({"auths": {a.key: entry}})
    elif fmt == "dockercfg":
        out = json.dumps({a.key: {"auth": auth, "email": "ci@example.invalid"}})
    elif fmt == "secret-yaml":
        dcj = json.dumps({"auths": {a.key: {"auth": auth}}})
        out = ("apiVersion: v1\nkind: Secret\nmetadata:\n  name: regcred\n  namespace: ci\n"
               "type: kubernetes.io/dockerconfigjson\ndata:\n  .dockerconfigjson: %s\n" % b64(dcj))
    elif fmt == "secret-json-dockercfg":
        dcfg = json.dumps({a.key: {"auth": auth, "email": "ci@example.invalid"}})
        out = json.dumps({"apiVersion": "v1", "kind": "Secret",
                          "metadata": {"name": "legacy", "namespace": "ci"},
                          "type": "kubernetes.io/dockercfg", "data": {".dockercfg": b64(dcfg)}})
    elif fmt == "authjson":
        out = json.dumps({"auths": {a.key: {"auth": auth}}})
    elif fmt == "token":
        out = pw
    elif fmt == "containerd" and a.version == 3:
        out = containerd_v3(a, pw)
    elif fmt == "containerd":
        cri = 'plugins."io.containerd.grpc.v1.cri"'
        lines = ["version = 2"]
        if a.state_dir:
            d = a.state_dir
            lines += [
                "root = %s" % q(d + "/root"),
                "state = %s" % q(d + "/state"),
                # Plugins that would touch the host (/opt/containerd) or
                # cannot work here; pulls need none of them.
                'disabled_plugins = ["io.containerd.internal.v1.opt", '
                '"io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", '
                '"io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.devmapper", '
                '"io.containerd.snapshotter.v1.overlayfs", '
                '"io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]',
                "[grpc]", "  address = %s" % q(d + "/c.sock"),
                "[ttrpc]", "  address = %s" % q(d + "/c.sock.ttrpc"),
                "[debug]", '  address = ""', '  level = "info"',
                "[metrics]", '  address = ""',
                "[%s]" % cri,
                "  disable_apparmor = true",
                '  stream_server_address = "127.0.0.1"',
                '  stream_server_port = "0"',
                "[%s.containerd]" % cri,
                '  snapshotter = "native"',
                "[%s.cni]" % cri,
                "  bin_dir = %s" % q(d + "/cni/bin"),
                "  conf_dir = %s" % q(d + "/cni/conf"),
            ]
        if a.https_endpoint or a.state_dir:
            lines += ["[%s.registry.mirrors.%s]" % (cri, q(a.key)),
                      "  endpoint = [%s]" % q("https://" + a.key)]
        if not a.no_auth:
            lines += ["[%s.registry.configs.%s.auth]" % (cri, q(a.key)),
                      "  username = %s" % q(a.user),
                      "  password = %s" % q(pw)]
        if a.ca:
            lines += ["[%s.registry.configs.%s.tls]" % (cri, q(a.key)),
                      "  ca_file = %s" % q(a.ca)]
        out = "\n".join(lines)
    else:
        sys.exit("cred-files.py: unknown format %r" % fmt)

    tmp = a.dst + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(out + "\n")
    os.chmod(tmp, 0o600)
    os.replace(tmp, a.dst)


def default_platform():
    """containerd's platforms.DefaultSpec() for this machine, formatted."""
    arch = {"x86_64": "amd64", "aarch64": "arm64", "armv7l": "arm"}.get(os.uname().machine, os.uname().machine)
    return "linux/" + arch


def containerd_v3(a, pw):
    """The containerd config for containerd 2.x (version = 3): the 1.6
    config's settings under 2.x's plugin names. The CRI's registry and
    snapshotter are the image service's (io.containerd.cri.v1.images), the
    sandbox settings the runtime's (io.containerd.cri.v1.runtime); the
    stream server stays with io.containerd.grpc.v1.cri."""
    images = 'plugins."io.containerd.cri.v1.images"'
    runtime = 'plugins."io.containerd.cri.v1.runtime"'
    lines = ["version = 3"]
    if a.state_dir:
        d = a.state_dir
        lines += [
            "root = %s" % q(d + "/root"),
            "state = %s" % q(d + "/state"),
            "temp = %s" % q(d + "/tmp"),
            # 2.x imports /etc/containerd/conf.d/*.toml unless told not to.
            "imports = []",
            # As for 1.6, plus what 2.x adds that would touch the host (NRI's
            # socket under /var/run/nri, /opt/containerd) or cannot work here.
            'disabled_plugins = ["io.containerd.internal.v1.opt", '
            '"io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", '
            '"io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.blockfile", '
            '"io.containerd.snapshotter.v1.erofs", "io.containerd.snapshotter.v1.overlayfs", '
            '"io.containerd.nri.v1.nri", "io.containerd.image-verifier.v1.bindir", '
            '"io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]',
            "[grpc]", "  address = %s" % q(d + "/c.sock"),
            "[ttrpc]", "  address = %s" % q(d + "/c.sock.ttrpc"),
            "[debug]", '  address = ""', '  level = "info"',
            "[metrics]", '  address = ""',
            '[plugins."io.containerd.grpc.v1.cri"]',
            '  stream_server_address = "127.0.0.1"',
            '  stream_server_port = "0"',
            "[%s]" % images,
            '  snapshotter = "native"',
            "[%s]" % runtime,
            "  disable_apparmor = true",
            "[%s.cni]" % runtime,
            "  bin_dirs = [%s]" % q(d + "/cni/bin"),
            "  conf_dir = %s" % q(d + "/cni/conf"),
            # The transfer service (which the CRI's image service needs
            # even when it pulls locally) unpacks for overlayfs unless told.
            '[plugins."io.containerd.transfer.v1.local"]',
            "  unpack_config = [{platform = %s, snapshotter = \"native\"}]" % q(default_platform()),
        ]
    # The registry: 2.x reads no TLS settings from registry.configs, so the
    # endpoint and its CA are a hosts.toml under config_path (needs
    # --state-dir); registry.configs.auth (deprecated, still read by 2.4) is
    # the only place for credentials.
    if a.https_endpoint or a.ca:
        if not a.state_dir:
            sys.exit("cred-files.py: containerd --version 3: --https-endpoint/--ca need --state-dir (hosts.toml)")
    if a.state_dir:
        certs = os.path.join(a.state_dir, "certs.d")
        host = ['server = %s' % q("https://" + a.key),
                "[host.%s]" % q("https://" + a.key),
                '  capabilities = ["pull", "resolve"]']
        if a.ca:
            host.append("  ca = %s" % q(a.ca))
        os.makedirs(os.path.join(certs, a.key), mode=0o700, exist_ok=True)
        with open(os.path.join(certs, a.key, "hosts.toml"), "w") as f:
            f.write("\n".join(host) + "\n")
        lines += ["[%s.registry]" % images, "  config_path = %s" % q(certs)]
    if not a.no_auth:
        lines += ["[%s.registry.configs.%s.auth]" % (images, q(a.key)),
                  "  username = %s" % q(a.user),
                  "  password = %s" % q(pw)]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
