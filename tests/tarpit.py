#!/usr/bin/env python3
"""tarpit.py: a small TCP proxy for fault injection in the pullhelper tests.

    tarpit.py --listen-port-file F --target 127.0.0.1:PORT [--stall-after BYTES]
              [--rate BYTES_PER_SEC] [--log FILE] [--lifetime SECONDS]

Listens on 127.0.0.1:0 (an ephemeral port), writes the port to F (atomically:
written to F.tmp and renamed) and forwards every accepted connection to
TARGET in both directions. It never decrypts anything: TLS passes through, so
a client verifies the target's certificate as usual.

--stall-after BYTES   after BYTES server->client bytes on a connection, stop
                      forwarding data from the server: the connection stays
                      open, what the server sends is read and discarded, and
                      client->server data is still forwarded. -1 (default):
                      never stall.
--rate BYTES_PER_SEC  limit server->client throughput on each connection
                      (0, default: unlimited).
--log FILE            append one line per event (accept, stall, close).
--lifetime SECONDS    exit by itself after this long (default 600), so that a
                      forgotten proxy does not outlive the test run.

Python 3 standard library only; one thread per direction per connection.
"""

import argparse
import os
import socket
import sys
import threading
import time

LOG_LOCK = threading.Lock()
LOG_FILE = None


def log(msg):
    if LOG_FILE is None:
        return
    line = "%.3f %s\n" % (time.time(), msg)
    with LOG_LOCK:
        with open(LOG_FILE, "a") as f:
            f.write(line)


def parse_target(s):
    host, sep, port = s.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise argparse.ArgumentTypeError("target must be HOST:PORT, got %r" % s)
    return host, int(port)


def shutdown_write(sock):
    try:
        sock.shutdown(socket.SHUT_WR)
    except OSError:
        pass


class Conn:
    def __init__(self, cid, client, server, stall_after, rate):
        self.cid = cid
        self.client = client
        self.server = server
        self.stall_after = stall_after
        self.rate = rate
        self.c2s = 0
        self.s2c = 0
        self.discarded = 0
        self.stalled = False
        self.lock = threading.Lock()
        self.open_dirs = 2

    def client_to_server(self):
        try:
            while True:
                data = self.client.recv(65536)
                if not data:
                    break
                self.server.sendall(data)
                self.c2s += len(data)
        except OSError:
            pass
        shutdown_write(self.server)
        self.done()

    def server_to_client(self):
        start = time.monotonic()
        try:
            while True:
                data = self.server.recv(65536)
                if not data:
                    break
                if self.stalled:
                    self.discarded += len(data)
                    continue
                if self.stall_after >= 0 and self.s2c + len(data) > self.stall_after:
                    keep = self.stall_after - self.s2c
                    if keep > 0:
                        self.client.sendall(data[:keep])
                        self.s2c += keep
                    self.discarded += len(data) - max(keep, 0)
                    self.stalled = True
                    log("conn %d stalled after %d server->client bytes" % (self.cid, self.s2c))
                    continue
                if self.rate > 0:
                    # Pace: the bytes sent so far may not exceed rate * elapsed.
                    due = start + (self.s2c + len(data)) / float(self.rate)
                    delay = due - time.monotonic()
                    if delay > 0:
                        time.sleep(delay)
                self.client.sendall(data)
                self.s2c += len(data)
        except OSError:
            pass
        if not self.stalled:
            shutdown_write(self.client)
        self.done()

    def done(self):
        with self.lock:
            self.open_dirs -= 1
            last = self.open_dirs == 0
        if last:
            for s in (self.client, self.server):
                try:
                    s.close()
                except OSError:
                    pass
            log("conn %d closed c2s=%d s2c=%d discarded=%d stalled=%s"
                % (self.cid, self.c2s, self.s2c, self.discarded, self.stalled))


def main():
    global LOG_FILE
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--listen-port-file", required=True)
    ap.add_argument("--target", required=True, type=parse_target)
    ap.add_argument("--stall-after", type=int, default=-1)
    ap.add_argument("--rate", type=int, default=0)
    ap.add_argument("--log")
    ap.add_argument("--lifetime", type=float, default=600)
    args = ap.parse_args()
    LOG_FILE = args.log

    # Exit by itself after --lifetime seconds whatever happens.
    timer = threading.Timer(args.lifetime, lambda: os._exit(0))
    timer.daemon = True
    timer.start()

    lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(64)
    port = lsock.getsockname()[1]
    tmp = args.listen_port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write("%d\n" % port)
    os.rename(tmp, args.listen_port_file)
    log("listening on 127.0.0.1:%d target %s:%d stall_after=%d rate=%d"
        % (port, args.target[0], args.target[1], args.stall_after, args.rate))

    cid = 0
    while True:
        try:
            client, addr = lsock.accept()
        except OSError:
            continue
        cid += 1
        try:
            server = socket.create_connection(args.target, timeout=10)
            server.settimeout(None)
        except OSError as e:
            log("conn %d from %s:%d: connecting to target failed: %s" % (cid, addr[0], addr[1], e))
            client.close()
            continue
        log("conn %d from %s:%d" % (cid, addr[0], addr[1]))
        c = Conn(cid, client, server, args.stall_after, args.rate)
        for fn in (c.client_to_server, c.server_to_client):
            t = threading.Thread(target=fn, daemon=True)
            t.start()


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit(0)
