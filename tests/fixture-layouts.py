#!/usr/bin/env python3
"""fixture-layouts.py KIND DIR: write a containers/image dir: layout of an
image of a shape the generated fixtures (tests/imagegen) have not, for
helpers.bash to push with its digests as they are:

  dockercfg     a Docker schema 2 image whose config is as docker build
                writes one (container_config, docker_version, a Docker
                config block: fields an OCI config has not);
  uncompressed  an OCI image of one layer stored as a plain tar
                (...layer.v1.tar), as some builders push them; its digest is
                its diff_id;
  duplayers     an OCI image of three gzip layers, the first and the last
                the same blob.
"""
import gzip, hashlib, io, json, os, sys, tarfile


def main():
    kind, d = sys.argv[1], sys.argv[2]
    os.makedirs(d)

    def put(b):
        h = hashlib.sha256(b).hexdigest()
        with open(os.path.join(d, h), "wb") as f:
            f.write(b)
        return "sha256:" + h, len(b)

    def tar(name, data):
        raw = io.BytesIO()
        with tarfile.open(fileobj=raw, mode="w", format=tarfile.USTAR_FORMAT) as t:
            ti = tarfile.TarInfo(name)
            ti.size, ti.mtime = len(data), 0
            t.addfile(ti, io.BytesIO(data))
        return raw.getvalue()

    def diff_id(t):
        return "sha256:" + hashlib.sha256(t).hexdigest()

    oci = "application/vnd.oci.image."
    docker = "application/vnd.docker."
    if kind == "dockercfg":
        t = tar("hello.txt", b"dockercfg fixture\n")
        ld, ls = put(gzip.compress(t, mtime=0))
        layers = [{"mediaType": docker + "image.rootfs.diff.tar.gzip", "size": ls, "digest": ld}]
        cfg = {"architecture": "amd64", "config": {"Hostname": "", "Domainname": "", "User": "", "AttachStdin": False,
               "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"], "Cmd": ["sh"], "Image": "",
               "Volumes": None, "WorkingDir": "", "Entrypoint": None, "OnBuild": None, "Labels": None},
               "container": "8c2b0f8e", "container_config": {"Hostname": "8c2b0f8e", "Cmd": ["/bin/sh", "-c", "#(nop) CMD [\"sh\"]"]},
               "created": "2023-05-19T20:19:24.093189497Z", "docker_version": "20.10.23",
               "history": [{"created": "2023-05-19T20:19:23Z", "created_by": "ADD file:hello.txt in / "}], "os": "linux",
               "rootfs": {"type": "layers", "diff_ids": [diff_id(t)]}}
        mt, cmt = docker + "distribution.manifest.v2+json", docker + "container.image.v1+json"
    elif kind in ("uncompressed", "duplayers"):
        layers, ids = [], []
        if kind == "uncompressed":
            t = tar("plain.txt", b"an uncompressed layer\n" * 64)
            ld, ls = put(t)
            layers.append({"mediaType": oci + "layer.v1.tar", "size": ls, "digest": ld})
            ids.append(ld)
        else:
            a, b = tar("a.txt", b"the layer twice\n"), tar("b.txt", b"between them\n")
            for t in (a, b, a):
                ld, ls = put(gzip.compress(t, mtime=0))
                layers.append({"mediaType": oci + "layer.v1.tar+gzip", "size": ls, "digest": ld})
                ids.append(diff_id(t))
        cfg = {"architecture": "amd64", "os": "linux", "config": {"Cmd": ["/bin/true"]},
               "rootfs": {"type": "layers", "diff_ids": ids}}
        mt, cmt = oci + "manifest.v1+json", oci + "config.v1+json"
    else:
        sys.exit("fixture-layouts.py: unknown kind " + kind)
    cd, cs = put(json.dumps(cfg).encode())
    m = {"schemaVersion": 2, "mediaType": mt, "config": {"mediaType": cmt, "size": cs, "digest": cd}, "layers": layers}
    with open(os.path.join(d, "manifest.json"), "wb") as f:
        f.write(json.dumps(m).encode())
    with open(os.path.join(d, "version"), "w") as f:
        f.write("Directory Transport Version: 1.1\n")


main()
