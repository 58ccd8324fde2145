#!/usr/bin/python3
"""A kubelet credential-provider exec plugin for the pullhelper system tests.

Speaks credentialprovider.kubelet.k8s.io/v1 as the kubelet runs plugins
(pkg/credentialprovider/plugin): one CredentialProviderRequest JSON object
on stdin, one CredentialProviderResponse on stdout, exit 0; anything else is
a failure (message on stderr, exit 1).

Configured only through the environment, which a CredentialProviderConfig
sets with `env` (so no secret is ever in argv):

  FAKE_PROVIDER_PASSWORD_FILE  file whose first line is the password (required)
  FAKE_PROVIDER_USERNAME       username returned (required)
  FAKE_PROVIDER_RECORD         append one JSON line per run: the request
                               received, argv[1:] and the plugin's name
                               (optional; never holds the password). A
                               serviceAccountToken in the request is
                               recorded as "serviceAccountTokenSha256" (its
                               hex SHA-256), never itself; the
                               serviceAccountAnnotations as received
  FAKE_PROVIDER_EXPECT_TOKEN_FILE
                               the request's serviceAccountToken must equal
                               this file's first line, or the plugin fails
                               (and returns no credential): the stand-in for
                               a plugin that exchanges the pod's token
  FAKE_PROVIDER_PASSWORD_PREFIX
                               text put before the password (e.g. "wrong-"
                               to return a credential the registry refuses)
  FAKE_PROVIDER_CACHE_DURATION cacheDuration of the response (optional)

The auth map has one entry, keyed by the registry (host[:port]) of the
requested image, and cacheKeyType is Registry.
"""

import hashlib
import json
import os
import sys

API_VERSION = "credentialprovider.kubelet.k8s.io/v1"


def die(msg):
    sys.stderr.write("fake-credential-provider: %s\n" % msg)
    sys.exit(1)


def main():
    raw = sys.stdin.read()
    try:
        req = json.loads(raw)
    except ValueError as e:
        die("request is not JSON: %s" % e)
    if not isinstance(req, dict):
        die("request is not a JSON object")

    token = req.get("serviceAccountToken")
    record = os.environ.get("FAKE_PROVIDER_RECORD")
    if record:
        logged = dict(req)
        if token is not None:
            del logged["serviceAccountToken"]
            logged["serviceAccountTokenSha256"] = hashlib.sha256(str(token).encode()).hexdigest()
        with open(record, "a") as f:
            f.write(json.dumps({"request": logged, "args": sys.argv[1:],
                                "name": os.path.basename(sys.argv[0])}) + "\n")

    expect = os.environ.get("FAKE_PROVIDER_EXPECT_TOKEN_FILE")
    if expect:
        try:
            with open(expect) as f:
                want = f.readline().strip()
        except OSError as e:
            die("cannot read the expected token file: %s" % e.strerror)
        if token != want:
            die("the request has no service account token or the wrong one")

    if req.get("apiVersion") != API_VERSION:
        die("request apiVersion is %r, want %r" % (req.get("apiVersion"), API_VERSION))
    if req.get("kind") != "CredentialProviderRequest":
        die("request kind is %r, want CredentialProviderRequest" % req.get("kind"))
    image = req.get("image")
    if not isinstance(image, str) or not image:
        die("request has no image")

    user = os.environ.get("FAKE_PROVIDER_USERNAME")
    pwfile = os.environ.get("FAKE_PROVIDER_PASSWORD_FILE")
    if not user or not pwfile:
        die("FAKE_PROVIDER_USERNAME and FAKE_PROVIDER_PASSWORD_FILE must be set")
    try:
        with open(pwfile) as f:
            password = f.readline().strip()
    except OSError as e:
        die("cannot read the password file: %s" % e.strerror)
    password = os.environ.get("FAKE_PROVIDER_PASSWORD_PREFIX", "") + password

    resp = {
        "apiVersion": API_VERSION,
        "kind": "CredentialProviderResponse",
        "cacheKeyType": "Registry",
        "auth": {image.split("/")[0]: {"username": user, "password": password}},
    }
    duration = os.environ.get("FAKE_PROVIDER_CACHE_DURATION")
    if duration:
        resp["cacheDuration"] = duration
    sys.stdout.write(json.dumps(resp) + "\n")


if __name__ == "__main__":
    main()
