#!/usr/bin/env python3
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Multi-node replicas: the peer watch every rank runs, and a stand-in rank for hosts without GPUs.

1. PeerWatch (started by gpuhost-launch.py in the server's own process when GPUHOST_REPLICA is set).
   systemd dependencies cannot cross hosts, and a real SGLang rank does not exit promptly when a peer dies:
   sglang #3099 ("when there is a problem with a node-rank 1 machine, like NCCL WatchDog Timeout, the process on
   node-rank 0 will not exit immediately"); torch's NCCL watchdog tears the process down only once a collective
   times out (torch docs, ProcessGroupNCCL environment variables: TORCH_NCCL_ASYNC_ERROR_HANDLING, default 3 =
   "tearing down process"). The watch does what the watchdog does, at once: rank 0 listens on the watch port,
   every other rank connects to it (retrying until rank 0 is there, like a TCPStore client), and a lost
   connection -- the peer's process died (FIN/RST) or its host vanished (TCP keepalive) -- aborts this process
   (SIGABRT, like the watchdog's abort). systemd's Restart=on-failure then starts the rank again; rank >= 1
   blocks until rank 0 listens again, so the replica comes back rank 0 first. Rank 0 also gives up when the
   other ranks do not all join within the join timeout (torch TCPStore::waitForWorkers times out the same way,
   pytorch PR #111805). State for the deploy's gate: GPUHOST_REPLICA_STATE (JSON: joined ranks, since when).

2. Stand-in rank (`python gpuhost-launch.py -m gpuhost_replica ARGS`): takes SGLang's own argv (validated
   beforehand by SGLang's parser) and behaves like a rank for ordering and restarts, not for inference:
   rank 0 binds the --dist-init-addr port for its lifetime (the TCPStore torch's rendezvous serves there), the other ranks
   connect and block until it is there; rank 0 opens its HTTP port only when every rank joined (SGLang 0.5.23
   starts the HTTP server on node_rank 0 after the scheduler processes initialised, which needs every rank;
   the other ranks serve no HTTP: launch_server only runs it on node_rank 0 -- unverified beyond 0.5.23).
   A lost peer does NOT kill the stand-in at once: like a real rank (sglang #3099) it carries on until its
   collective timeout, GPUHOST_STANDIN_COLLECTIVE_TIMEOUT seconds (torch's NCCL default is 10 minutes:
   torch.distributed default_pg_timeout; unverified for SGLang's own setting), then aborts. So what restarts a
   replica quickly on the test hosts is the PeerWatch, exactly as on GPU hosts.
   The stand-in answers /v1/completions from GPUHOST_STANDIN_ANSWERS (a JSON file prompt -> text) so that the
   deploy's canary can run on rank 0; it is no model.
"""
import argparse
import json
import os
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def log(msg):
    sys.stderr.write("gpuhost-replica: %s\n" % msg)
    sys.stderr.flush()


def abort(msg):
    """Die like torch's watchdog: a message, then SIGABRT (systemd sees a failure and Restart= applies)."""
    log(msg + "; aborting")
    os.abort()


def keepalive(sock, idle=5, interval=2, count=3):
    """A peer whose host vanished sends no FIN: TCP keepalive notices in idle + interval * count seconds."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for name, value in (("TCP_KEEPIDLE", idle), ("TCP_KEEPINTVL", interval), ("TCP_KEEPCNT", count)):
        if hasattr(socket, name):
            sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, name), value)


def split_addr(addr):
    host, dummy, port = addr.rpartition(":")
    return host.strip("[]"), int(port)


class Rendezvous(object):
    """Rank 0 accepts the other ranks on PORT; rank >= 1 connects to HEAD:PORT (retrying until it is there).
    ``on_lost(rank)`` is called when a joined peer's connection ends."""

    def __init__(self, rank, nnodes, head, port, join_timeout, on_lost, name, state_file=None, keep_listening=False):
        self.rank, self.nnodes, self.head, self.port = int(rank), int(nnodes), head, int(port)
        self.join_timeout, self.on_lost, self.name, self.state_file = float(join_timeout), on_lost, name, state_file
        self.keep_listening = keep_listening
        self.joined = set([self.rank]) if self.rank == 0 else set()
        self.all_joined = threading.Event()
        self.started = time.time()
        self._socks = []

    def write_state(self):
        if not self.state_file:
            return
        tmp = self.state_file + ".tmp"
        with open(tmp, "w") as fh:
            json.dump({"rank": self.rank, "nnodes": self.nnodes, "joined": sorted(self.joined),
                       "all_joined": self.all_joined.is_set(), "pid": os.getpid(), "started": self.started,
                       "joined_at": time.time() if self.all_joined.is_set() else None}, fh)
        os.rename(tmp, self.state_file)

    def start(self):
        self.write_state()
        target = self._serve if self.rank == 0 else self._connect
        threading.Thread(target=target, name=self.name, daemon=True).start()
        return self

    def _watch(self, sock, peer):
        try:
            while True:
                data = sock.recv(64)
                if not data:
                    break
                if self.rank != 0 and data.startswith(b"all"):
                    self.all_joined.set()
                    self.write_state()
        except OSError:
            pass
        self.on_lost(peer)

    def _serve(self):
        srv = socket.socket(socket.AF_INET6 if ":" in self.head else socket.AF_INET, socket.SOCK_STREAM)
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind(("", self.port))
        srv.listen(self.nnodes)
        srv.settimeout(1.0)
        log("%s: rank 0 listening on port %d for %d rank(s)" % (self.name, self.port, self.nnodes - 1))
        conns = {}
        while len(self.joined) < self.nnodes:
            if time.time() - self.started > self.join_timeout:
                abort("%s: ranks %s did not join within %.0f s" % (
                    self.name, sorted(set(range(self.nnodes)) - self.joined), self.join_timeout))
            try:
                conn, addr = srv.accept()
            except socket.timeout:
                continue
            conn.settimeout(10)
            try:
                line = conn.recv(64).decode("ascii", "replace").split()
                peer = int(line[1]) if len(line) == 2 and line[0] == "rank" else -1
            except (OSError, ValueError):
                peer = -1
            if not 0 < peer < self.nnodes or peer in self.joined:
                log("%s: refused %s (said %r)" % (self.name, addr[0], line if peer == -1 else peer))
                conn.close()
                continue
            conn.settimeout(None)
            keepalive(conn)
            conns[peer] = conn
            self.joined.add(peer)
            log("%s: rank %d joined from %s (%d/%d)" % (self.name, peer, addr[0], len(self.joined), self.nnodes))
            self.write_state()
        self.all_joined.set()
        self.write_state()
        for peer, conn in conns.items():
            conn.sendall(b"all\n")
            threading.Thread(target=self._watch, args=(conn, peer), daemon=True).start()
        if not self.keep_listening:
            srv.close()  # the peer watch: a rank that restarts finds the port closed until rank 0 restarts too
            return
        # torch's TCPStore server lives as long as rank 0's process: the port stays open, late ranks get nowhere
        srv.settimeout(None)
        while True:
            conn, addr = srv.accept()
            log("%s: all %d ranks joined already; refused %s" % (self.name, self.nnodes, addr[0]))
            conn.close()

    def _connect(self):
        deadline = self.started + self.join_timeout
        while True:
            try:
                sock = socket.create_connection((self.head, self.port), timeout=5)
                break
            except OSError as exc:
                if time.time() > deadline:
                    abort("%s: rank 0 at %s:%d not reachable within %.0f s (%s)" % (
                        self.name, self.head, self.port, self.join_timeout, exc))
                time.sleep(1)
        sock.settimeout(None)
        keepalive(sock)
        sock.sendall(("rank %d\n" % self.rank).encode("ascii"))
        self.joined = set([0, self.rank])
        log("%s: rank %d connected to rank 0 at %s:%d" % (self.name, self.rank, self.head, self.port))
        self.write_state()
        self._watch(sock, 0)


def start_peer_watch(spec, environ):
    """GPUHOST_REPLICA='rank=R nnodes=N head=ADDR port=P join_timeout=S'; called by gpuhost-launch.py."""
    fields = dict(item.partition("=")[::2] for item in spec.split())
    try:
        return Rendezvous(fields["rank"], fields["nnodes"], fields["head"], fields["port"],
                          fields.get("join_timeout", "600"),
                          lambda peer: abort("peer watch: rank %s lost" % peer), "peer watch",
                          environ.get("GPUHOST_REPLICA_STATE") or None).start()
    except (KeyError, ValueError) as exc:
        raise SystemExit("GPUHOST_REPLICA=%r: want 'rank=R nnodes=N head=ADDR port=P [join_timeout=S]' (%s)"
                         % (spec, exc))


class Handler(BaseHTTPRequestHandler):
    answers = {}
    model = "standin"

    def log_message(self, *args):
        pass

    def _send(self, code, obj):
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path in ("/health", "/health_generate"):
            self._send(200, {})
        elif self.path == "/v1/models":
            self._send(200, {"object": "list", "data": [{"id": self.model, "object": "model"}]})
        else:
            self._send(404, {"error": "not found"})

    def do_POST(self):
        req = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        chat = self.path == "/v1/chat/completions"
        if not chat and self.path != "/v1/completions":
            return self._send(404, {"error": "not found"})
        key = (req.get("messages") or [{}])[-1].get("content", "") if chat else req.get("prompt", "")
        text = self.answers.get(key, " I do not know.")
        kind = "chat.completion" if chat else "text_completion"
        usage = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
        if not req.get("stream"):
            choice = {"index": 0, "finish_reason": "stop"}
            choice.update({"message": {"role": "assistant", "content": text}} if chat else {"text": text})
            return self._send(200, {"object": kind, "model": self.model, "choices": [choice], "usage": usage})
        # OpenAI-style server-sent events, as SGLang streams them: one chunk, the finish, usage, [DONE]
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        piece = {"delta": {"role": "assistant", "content": text}} if chat else {"text": text}
        for chunk in ({"index": 0, "finish_reason": None}, {"index": 0, "finish_reason": "stop"}):
            if chunk["finish_reason"] is None:
                chunk.update(piece)
            else:
                chunk.update({"delta": {}} if chat else {"text": ""})
            body = {"object": kind + ".chunk" if chat else kind, "model": self.model, "choices": [chunk]}
            self.wfile.write(("data: %s\n\n" % json.dumps(body)).encode())
        final = {"object": kind, "model": self.model, "choices": [], "usage": usage}
        self.wfile.write(("data: %s\n\n" % json.dumps(final)).encode())
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()


def standin(argv, environ):
    p = argparse.ArgumentParser(prog="gpuhost_replica (stand-in rank)", allow_abbrev=False)
    p.add_argument("--nnodes", type=int, default=1)
    p.add_argument("--node-rank", type=int, default=0)
    p.add_argument("--dist-init-addr", default="127.0.0.1:5000")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--model-path", default="standin")
    p.add_argument("--served-model-name", default="")
    args, _rest = p.parse_known_args(argv)  # the rest was validated by SGLang's parser before the restart
    head, port = split_addr(args.dist_init_addr)
    timeout = float(environ.get("GPUHOST_STANDIN_COLLECTIVE_TIMEOUT", "600"))

    def lost(peer):
        log("stand-in rank %d: peer rank %s lost; hanging in the collective for %.0f s like a real rank "
            "(sglang #3099)" % (args.node_rank, peer, timeout))
        time.sleep(timeout)
        abort("stand-in rank %d: collective timed out after %.0f s" % (args.node_rank, timeout))

    rdv = Rendezvous(args.node_rank, args.nnodes, head, port, environ.get("GPUHOST_STANDIN_JOIN_TIMEOUT", "600"),
                     lambda peer: threading.Thread(target=lost, args=(peer,), daemon=True).start(),
                     "dist-init", keep_listening=True).start()
    rdv.all_joined.wait()
    if args.node_rank != 0:
        log("stand-in rank %d: all ranks joined; no HTTP server on node_rank > 0" % args.node_rank)
        while True:
            time.sleep(3600)
    if environ.get("GPUHOST_STANDIN_ANSWERS"):
        with open(environ["GPUHOST_STANDIN_ANSWERS"]) as fh:
            Handler.answers = json.load(fh)
    Handler.model = args.served_model_name or args.model_path
    log("stand-in rank 0: all %d ranks joined; HTTP on %s:%d" % (args.nnodes, args.host, args.port))
    ThreadingHTTPServer((args.host, args.port), Handler).serve_forever()


if __name__ == "__main__":
    standin(sys.argv[1:], os.environ)
