#!/usr/bin/env python3
"""bench-serve.py - the batched server against its peers, side by side.

    tools/bench-serve.py --model M.gguf [--bangtrace B] [--llama-server S]
                         [--parallel N] [--concurrency 1,4,16] [--requests R]
                         [--rounds K] [--max-tokens T] [--ctx C]
                         [--load SECONDS] [--json OUT]

Arms, each a server started once with its own defaults and kept up:
  batched       bangtrace serve --parallel N (continuous batching, prefix cache)
  batched+db    the same with --trace-dir (server.db written: provenance on)
  engines       bangtrace serve --parallel N --batching off (N engines)
  llama-server  llama-server -np N -c N*C (its own defaults)
Every round sends the same R requests (shared prefixes, greedy, T tokens)
to each arm at each concurrency, the arms in an order that rotates per
round; the table gives the medians over the rounds of completion tokens/s
(usage.completion_tokens over the wall time) and p50/p99 request latency,
and the ratios to `engines` and to llama-server. Figures, never assertions.

--load S: afterwards a bounded load test on a traced batched server
(loopback): S seconds of requests at concurrency 16, a third of them
streamed and dropped mid-stream by the client, then SIGTERM with requests
still in flight; it checks that no accepted request went unanswered (an
answer, "cancelled" by the shutdown, or a 503), none was answered twice,
every answered request has a trace and every trace is closed, and
server.db is consistent (every request finished, no batch row of an
unknown request, status ok), and prints what it found (exit 1 if not).
--arms "" with --load runs the load test alone (tests/serve_batch.sh)."""
import argparse
import http.client
import json
import os
import random
import shutil
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

PREFIXES = [
    "Once upon a time there was a little girl named Lily. She loved to play outside in the sun with her dog. ",
    "The old man walked to the river every morning. He looked at the water and smiled at the fish. ",
    "Tom had a red ball and a blue car. One day he went to the park with his mom and his friend Sam. ",
    "In a small town by the sea lived a baker who made the best bread. Every morning people came early. ",
]


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def wait_up(port, proc, secs=60):
    t0 = time.time()
    while time.time() - t0 < secs:
        if proc.poll() is not None:
            return False
        try:
            with urllib.request.urlopen("http://127.0.0.1:%d/health" % port, timeout=1) as f:
                if f.status == 200:
                    return True
        except Exception:
            pass
        time.sleep(0.2)
    return False


def mix(n, max_tokens, seed=5):
    rng = random.Random(seed)
    words = "and then the sun came out over the hill so they ran home fast".split()
    out = []
    for i in range(n):
        p = PREFIXES[i % len(PREFIXES)] + " ".join(rng.choice(words) for _ in range(8))
        out.append({"prompt": p, "max_tokens": max_tokens, "temperature": 0})
    return out


def post(port, body, timeout=300):
    req = urllib.request.Request("http://127.0.0.1:%d/v1/completions" % port, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    t0 = time.time()
    with urllib.request.urlopen(req, timeout=timeout) as f:
        j = json.loads(f.read())
    return time.time() - t0, j["usage"]["completion_tokens"]


def measure(port, reqs, conc):
    lat, toks, errs = [], [0], []
    lock = threading.Lock()
    it = iter(list(enumerate(reqs)))

    def worker():
        while True:
            with lock:
                nxt = next(it, None)
            if nxt is None:
                return
            try:
                dt, n = post(port, nxt[1])
                with lock:
                    lat.append(dt)
                    toks[0] += n
            except Exception as e:  # noqa: BLE001
                with lock:
                    errs.append(str(e))

    t0 = time.time()
    ts = [threading.Thread(target=worker) for _ in range(conc)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    wall = time.time() - t0
    lat.sort()
    p = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))] if lat else float("nan")
    return {"tps": toks[0] / wall, "p50": p(0.5) * 1e3, "p99": p(0.99) * 1e3, "errors": len(errs), "tokens": toks[0]}


class Server:
    def __init__(self, name, argv, tmp):
        self.name, self.port = name, free_port()
        argv = [a.replace("{port}", str(self.port)) for a in argv]
        self.log = open(os.path.join(tmp, name + ".log"), "w")
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT)
        if not wait_up(self.port, self.proc):
            self.stop()
            raise SystemExit("bench-serve: %s did not come up (%s)" % (name, self.log.name))

    def stop(self, sig=signal.SIGTERM):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                return self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                return self.proc.wait()
        return self.proc.returncode


def load_test(bt, model, ctx, parallel, threads, secs, tmp):
    tdir = os.path.join(tmp, "load-traces")
    s = Server("load", [bt, "serve", "--model", model, "--port", "{port}", "--parallel", str(parallel), "--ctx", str(ctx),
                        "--threads", str(threads), "--trace-dir", tdir, "--queue", "64"], tmp)
    reqs = mix(64, 24, seed=9)
    stats = {"sent": 0, "answered": 0, "cancelled": 0, "dropped": 0, "lost": 0, "closed": 0, "reset": 0, "codes": {}}
    ids, lock, stop = [], threading.Lock(), time.time() + secs
    term = [False]

    def worker(k):
        rng = random.Random(k)
        while time.time() < stop + 3 and not (term[0] and time.time() > stop + 1):
            body = dict(reqs[rng.randrange(len(reqs))])
            stream = rng.random() < 0.33
            with lock:
                stats["sent"] += 1
            try:
                if stream:
                    body["stream"] = True
                    c = socket.create_connection(("127.0.0.1", s.port), timeout=30)
                    data = json.dumps(body).encode()
                    c.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                              b"Content-Length: %d\r\n\r\n" % len(data) + data)
                    got = c.recv(4096)            # the headers and the first chunks, then drop it
                    c.close()
                    if not got:
                        raise ConnectionResetError("no answer")
                    code = int(got.split(b" ", 2)[1])
                    rid = [ln.split(b":", 1)[1].strip().decode() for ln in got.split(b"\r\n")
                           if ln.lower().startswith(b"x-request-id")]
                    with lock:
                        if code == 200:
                            stats["dropped"] += 1
                            ids.extend(rid)
                        else:
                            stats["codes"][code] = stats["codes"].get(code, 0) + 1
                else:
                    req = urllib.request.Request("http://127.0.0.1:%d/v1/completions" % s.port,
                                                 data=json.dumps(body).encode())
                    with urllib.request.urlopen(req, timeout=60) as f:
                        j = json.loads(f.read())
                    with lock:
                        stats["answered"] += 1
                        if j["choices"][0]["finish_reason"] == "cancelled":
                            stats["cancelled"] += 1
                        ids.append(j["bangtrace"]["request_id"])
            except urllib.error.HTTPError as e:
                with lock:
                    stats["codes"][e.code] = stats["codes"].get(e.code, 0) + 1
            except (OSError, http.client.HTTPException) as e:
                # urllib wraps socket errors in URLError (reason: the OSError)
                why = getattr(e, "reason", e) if isinstance(e, urllib.error.URLError) else e
                refused = isinstance(why, ConnectionRefusedError)
                # after the signal: the listening socket is gone (refused),
                # or a connection still in its backlog when the server
                # stopped accepting is reset before the server read it (its
                # own records must then show no admitted request unanswered);
                # before the signal, or anything else: lost
                reset = isinstance(why, (ConnectionResetError, BrokenPipeError, http.client.RemoteDisconnected))
                with lock:
                    stats["closed" if refused and term[0] else "reset" if reset and term[0] else "lost"] += 1
                if refused and term[0]:
                    return
            except Exception:  # noqa: BLE001 - accepted and then no answer: lost
                with lock:
                    stats["lost"] += 1

    ts = [threading.Thread(target=worker, args=(k,)) for k in range(16)]
    for t in ts:
        t.start()
    time.sleep(max(0.0, stop - time.time()))
    term[0] = True                            # SIGTERM with requests in flight
    rc = s.stop()
    for t in ts:
        t.join()
    problems = []
    if len(ids) != len(set(ids)):
        problems.append("a request id answered twice")
    if stats["lost"]:
        problems.append("%d requests accepted and never answered" % stats["lost"])
    names = os.listdir(tdir)
    if [n for n in names if n.endswith(("-wal", "-shm"))]:
        problems.append("WAL files left: %s" % [n for n in names if n.endswith(("-wal", "-shm"))][:3])
    traces = [n for n in names if n.startswith("req-") and n.endswith(".db")]
    open_traces = 0
    for n in traces:
        st = sqlite3.connect(os.path.join(tdir, n)).execute("select value from meta where key='status'").fetchone()
        if not st or st[0] not in ("ok", "interrupted"):
            open_traces += 1
    if open_traces:
        problems.append("%d traces not closed" % open_traces)
    db = sqlite3.connect(os.path.join(tdir, "server.db"))
    unfinished = db.execute("select count(*) from requests where finish is null").fetchone()[0]
    nreq = db.execute("select count(*) from requests").fetchone()[0]
    orphan = db.execute("select count(*) from batch where request not in (select request from requests)").fetchone()[0]
    status = db.execute("select value from meta where key='status'").fetchone()[0]
    if unfinished:
        problems.append("%d requests unfinished in server.db" % unfinished)
    if orphan:
        problems.append("%d batch rows of unknown requests" % orphan)
    if status != "ok":
        problems.append("server.db status %s" % status)
    if missing := [i for i in ids if i + ".db" not in traces]:
        problems.append("%d answered requests without a trace" % len(missing))
    print("load test: %d s at concurrency 16, then SIGTERM with requests in flight: %d sent, %d answered (%d of them "
          "cancelled by the shutdown), %d streams dropped by their clients mid-way, %d refused with HTTP %s, %d not accepted "
          "after the signal (%d of them reset in the listen backlog), %d lost; exit %d; %d traces, %d requests in server.db "
          "(status %s)%s"
          % (secs, stats["sent"], stats["answered"], stats["cancelled"], stats["dropped"], sum(stats["codes"].values()),
             ",".join(str(k) for k in stats["codes"]) or "-", stats["closed"] + stats["reset"], stats["reset"], stats["lost"], rc,
             len(traces), nreq, status,
             "; PROBLEMS: " + "; ".join(problems) if problems else "; consistent"))
    return 0 if not problems and rc == 0 else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--bangtrace", default="build/bangtrace")
    ap.add_argument("--llama-server", default=os.path.expanduser("~/.cache/bangtrace/llama.cpp/0.3.36/bin/llama-server"))
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--concurrency", default="1,4,16")
    ap.add_argument("--requests", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--ctx", type=int, default=1024)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--load", type=int, default=0)
    ap.add_argument("--arms", default="batched,batched+db,engines,llama-server",
                    help="comma list of arms; \"\" with --load: the load test alone")
    ap.add_argument("--json", help="write the medians to this new file (an existing one only with --force)")
    ap.add_argument("--force", action="store_true", help="--json may replace a file this tool wrote")
    a = ap.parse_args()
    if a.json and os.path.lexists(a.json):
        ours = False
        if os.path.isfile(a.json) and not os.path.islink(a.json):
            try:
                ours = "medians" in json.load(open(a.json))
            except (OSError, ValueError):
                ours = False
        if not (a.force and ours):
            print("bench-serve: %s exists%s" % (a.json, " (--force replaces it)" if ours else
                                                ": not a bench-serve result, refusing to replace it"), file=sys.stderr)
            return 2
    if not os.path.exists(a.model):
        print("bench-serve: %s: no such model" % a.model, file=sys.stderr)
        return 2
    tmp = tempfile.mkdtemp(prefix="bench-serve.")
    bt, n, c = a.bangtrace, str(a.parallel), str(a.ctx)
    argv = {
        "batched": [bt, "serve", "--model", a.model, "--port", "{port}", "--parallel", n, "--ctx", c, "--queue", "256"],
        "batched+db": [bt, "serve", "--model", a.model, "--port", "{port}", "--parallel", n, "--ctx", c, "--queue", "256",
                       "--trace-dir", os.path.join(tmp, "db"), "--trace", "sample:1000000000"],
        "engines": [bt, "serve", "--model", a.model, "--port", "{port}", "--parallel", n, "--ctx", c, "--queue", "256",
                    "--batching", "off"],
        "llama-server": [a.llama_server, "-m", a.model, "--port", "{port}", "-np", n, "-c", str(a.parallel * a.ctx),
                         "--host", "127.0.0.1"],
    }
    arms = [x for x in a.arms.split(",") if x]
    if "llama-server" in arms and not os.access(a.llama_server, os.X_OK):
        print("bench-serve: no llama-server at %s (tools/llama-cpp builds it): that arm is left out" % a.llama_server)
        arms.remove("llama-server")
    concs = [int(x) for x in a.concurrency.split(",")]
    if not arms:                              # --arms "": the load test alone
        rc = load_test(bt, a.model, a.ctx, a.parallel, a.threads, a.load, tmp) if a.load else 0
        shutil.rmtree(tmp, ignore_errors=True)
        return rc
    reqs = mix(a.requests, a.max_tokens)
    servers = {}
    try:
        for arm in arms:
            servers[arm] = Server(arm, argv[arm], tmp)
        for arm in arms:                      # warm-up: page the weights in, fill caches alike
            measure(servers[arm].port, reqs[:4], 2)
        res = {arm: {cc: [] for cc in concs} for arm in arms}
        for r in range(a.rounds):
            order = arms[r % len(arms):] + arms[:r % len(arms)]
            for arm in order:
                for cc in concs:
                    m = measure(servers[arm].port, reqs, cc)
                    res[arm][cc].append(m)
                    print("round %d %-13s c=%-3d %7.1f tok/s p50 %7.0f ms p99 %7.0f ms%s" % (
                        r + 1, arm, cc, m["tps"], m["p50"], m["p99"], "  (%d errors)" % m["errors"] if m["errors"] else ""),
                        flush=True)
    finally:
        for s in servers.values():
            s.stop()
    med = {arm: {cc: {k: statistics.median(x[k] for x in res[arm][cc]) for k in ("tps", "p50", "p99")} for cc in concs}
           for arm in arms}
    print("\nmedians of %d rounds, %d requests of %d tokens each, %d slots, %d threads, %s" % (
        a.rounds, a.requests, a.max_tokens, a.parallel, a.threads, os.path.basename(a.model)))
    print("%-13s %4s %9s %9s %9s %10s %12s" % ("arm", "conc", "tok/s", "p50 ms", "p99 ms", "/engines", "/llama-server"))
    for arm in arms:
        for cc in concs:
            m = med[arm][cc]
            e = med.get("engines", {}).get(cc)
            l = med.get("llama-server", {}).get(cc)
            print("%-13s %4d %9.1f %9.0f %9.0f %10s %12s" % (arm, cc, m["tps"], m["p50"], m["p99"],
                                                            "%.2fx" % (m["tps"] / e["tps"]) if e else "-",
                                                            "%.2fx" % (m["tps"] / l["tps"]) if l else "-"))
    if a.json:
        json.dump({"medians": {k: {str(cc): v for cc, v in d.items()} for k, d in med.items()}, "rounds": a.rounds}, open(a.json, "w"))
    rc = 0
    if a.load:
        rc = load_test(bt, a.model, a.ctx, a.parallel, a.threads, a.load, tmp)
    shutil.rmtree(tmp, ignore_errors=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
