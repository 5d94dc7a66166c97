#!/usr/bin/env python3
"""contam-power.py - how well `probe --contamination` separates servers:
per contaminating server, how often it finds the planted class (and
nothing else) and after how many requests; per clean server, how often it
calls a clean server anything but clean (the false-positive rate).

    tools/contam-power.py [--bangtrace B] [--runs R] [--clean-runs C] [--blocks 40,80] [--only NAME,...] [--out F.json]

Servers (each started once, probed R times with seeds 1000 N + 1..R, stopped):
  tests/contam_server.py in each mode (leak order prefix cache history
  concurrency drift; clean), bangtrace serve on stories260K (clean,
  pad_nan@p=0.05, prefix_wrong) and on a random qwen35 hybrid from
  tools/make-tiny-hybrid.py (clean, slot_noreset, slot_swap), and
  llama.cpp's llama-server -np 4 on the tiny random llama when it is built
  (clean). A drift server, and serve's cache faults once more as "young",
  are restarted before every run (the others age over their runs: their
  caches fill, their drift counts from their own start). Prints a Markdown table; --out writes every run.
Needs ../shared (BT_SHARED) for the models; a server whose model is
missing is skipped with a note.
"""
import argparse
import json
import math
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(HERE)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def wait_up(url, proc, secs):
    end = time.time() + secs
    while time.time() < end:
        if proc.poll() is not None:
            return False
        try:
            urllib.request.urlopen(url + "/health", timeout=1).read()
            return True
        except Exception:
            time.sleep(0.1)
    return False


def wilson_hi(k, n):
    if n == 0:
        return 1.0
    z = 1.959963984540054
    p = k / n
    d = 1 + z * z / n
    c = p + z * z / (2 * n)
    r = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return (c + r) / d


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bangtrace", default=os.path.join(SRC, "build", "bangtrace"))
    ap.add_argument("--runs", type=int, default=5, help="seeds per contaminating server and -n (default 5)")
    ap.add_argument("--clean-runs", type=int, default=20, help="seeds per clean server (default 20)")
    ap.add_argument("--blocks", default="40,80", help="-n values for contaminating servers (default 40,80)")
    ap.add_argument("--only", default="", help="comma-separated server names to run")
    ap.add_argument("--out", help="write every run as JSON here (not overwritten: refused if it exists)")
    a = ap.parse_args()
    if a.out and os.path.exists(a.out):
        sys.exit("contam-power.py: %s exists: not overwritten" % a.out)
    if not os.access(a.bangtrace, os.X_OK):
        sys.exit("contam-power.py: no bangtrace at %s (build it, or --bangtrace)" % a.bangtrace)
    blocks = [int(x) for x in a.blocks.split(",") if x]
    shared = os.environ.get("BT_SHARED", os.path.join(SRC, "..", "shared"))
    stories = os.path.join(shared, "models", "llama2c", "stories260K.bin")
    tok = os.path.join(shared, "models", "llama2c", "tok512.bin")
    tiny = os.path.join(shared, "models", "gguf-tiny", "llama-2-tiny-random.gguf")
    tmp = tempfile.mkdtemp(prefix="contam-power.")
    hyb = os.path.join(tmp, "qwen35.gguf")
    cache = os.environ.get("BT_CACHE", os.path.expanduser("~/.cache/bangtrace"))
    lserver = os.environ.get("BT_LLAMA_SERVER", os.path.join(cache, "llama.cpp", "0.3.36", "bin", "llama-server"))
    shape12 = os.path.join(tmp, "shape12.json")
    shape6 = os.path.join(tmp, "shape6.json")
    open(shape12, "w").write('{"max_tokens":12}')
    open(shape6, "w").write('{"max_tokens":6}')
    py = sys.executable
    cs = os.path.join(SRC, "tests", "contam_server.py")
    bt = a.bangtrace

    def serve(model, *extra):
        return lambda port: [bt, "serve"] + model + ["--host", "127.0.0.1", "--port", str(port), "--threads", "1",
                                                     "--parallel", "4"] + list(extra)
    st = ["--model", stories, "--tokenizer", tok]
    hy = ["--model", hyb]
    # name, start(port) -> argv, want (class or "clean"), shape, needs, restart each run
    servers = []
    for mode in ("leak", "order", "prefix", "cache", "history", "concurrency", "drift"):
        servers.append(("contam_server " + mode, (lambda m: lambda port: [py, cs, "--port", str(port), "--mode", m])(mode),
                        {"leak": "nonce_leak", "drift": "drift"}.get(mode, mode + "_dependence"), None, [], mode == "drift"))
    servers += [
        ("serve stories pad_nan@p=0.05", serve(st, "--inject", "pad_nan@p=0.05"), "history_dependence", shape12, [stories], False),
        ("serve stories prefix_wrong", serve(st, "--inject", "prefix_wrong"), "cache_dependence", shape12, [stories], False),
        ("serve stories pad_nan@p=0.05 (young)", serve(st, "--inject", "pad_nan@p=0.05"), "history_dependence", shape12, [stories], True),
        ("serve stories prefix_wrong (young)", serve(st, "--inject", "prefix_wrong"), "cache_dependence", shape12, [stories], True),
        ("serve qwen35 slot_noreset", serve(hy, "--inject", "slot_noreset"), "history_dependence", shape6, [hyb], False),
        ("serve qwen35 slot_swap", serve(hy, "--inject", "slot_swap"), "concurrency_dependence", shape6, [hyb], False),
        ("contam_server clean", lambda port: [py, cs, "--port", str(port), "--mode", "clean"], "clean", None, [], False),
        ("serve stories", serve(st), "clean", shape12, [stories], False),
        ("serve qwen35", serve(hy), "clean", shape6, [hyb], False),
        ("llama-server -np 4 (tiny llama)", lambda port: [lserver, "-m", tiny, "--host", "127.0.0.1", "--port", str(port), "-np", "4",
                                                         "-c", "2048", "-t", "1"], "clean", None, [tiny, lserver], False),
    ]
    only = set(x.strip() for x in a.only.split(",") if x.strip())
    if any(s[0].startswith("serve qwen35") for s in servers if not only or s[0] in only):
        r = subprocess.run([py, os.path.join(HERE, "make-tiny-hybrid.py"), hyb, "--arch", "qwen35", "--mtp", "0", "--seed", "7"],
                           capture_output=True, text=True)
        if r.returncode:
            print("note: make-tiny-hybrid.py failed: %s" % r.stderr.strip()[-200:], file=sys.stderr)
    rows, runs = [], []
    for name, start, want, shape, needs, restart in servers:
        if only and name not in only:
            continue
        missing = [n for n in needs if not os.path.exists(n)]
        if missing:
            print("note: %s skipped: %s not found" % (name, missing[0]), file=sys.stderr)
            continue
        seeds = range(1, (a.clean_runs if want == "clean" else a.runs) + 1)
        ns = [40] if want == "clean" else blocks
        proc = None
        for n in ns:
            hits, leak_first, reqs = 0, [], 0
            outcomes = {}
            for seed in seeds:
                if proc is None or restart:
                    if proc:
                        proc.terminate()
                        proc.wait()
                    port = free_port()
                    proc = subprocess.Popen(start(port), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                    url = "http://127.0.0.1:%d" % port
                    if not wait_up(url, proc, 60):
                        sys.exit("contam-power.py: %s did not come up" % name)
                # a seed of its own per run: a seed replayed against the same
                # server re-sends the same fresh prompts, which it has cached
                cmd = [bt, "probe", "--contamination", "--url", url, "--nonce-seed", str(1000 * n + seed), "-n", str(n), "--json"]
                if shape:
                    cmd += ["--request", shape]
                p = subprocess.run(cmd, capture_output=True, text=True)
                try:
                    j = json.loads(p.stdout)
                except ValueError:
                    sys.exit("contam-power.py: %s seed %d: no JSON (exit %d): %s" % (name, seed, p.returncode, p.stderr.strip()))
                found = j["found"]
                got = "clean" if j["outcome"] == "clean" else " ".join(found) if found else j["outcome"]
                outcomes[got] = outcomes.get(got, 0) + 1
                ok = got == "clean" if want == "clean" else want in found
                hits += ok
                reqs = j["requests"]
                if j["leaks"]["first_after_requests"] > 0:
                    leak_first.append(j["leaks"]["first_after_requests"])
                runs.append({"server": name, "n": n, "seed": seed, "exit": p.returncode, "outcome": j["outcome"], "found": found})
                print("%s -n %d seed %d: exit %d, %s" % (name, n, seed, p.returncode, got), file=sys.stderr)
            rows.append((name, want, n, reqs, hits, len(seeds), outcomes, sorted(leak_first)))
        if proc:
            proc.terminate()
            proc.wait()
    shutil.rmtree(tmp, ignore_errors=True)
    print("| server | planted | -n (requests a run) | right verdict | outcomes | note |")
    print("|---|---|---|---|---|---|")
    for name, want, n, reqs, hits, r, outcomes, lf in rows:
        note = ""
        if want == "clean":
            note = "false positives %d of %d (Wilson 95%% upper bound %.0f%%)" % (r - hits, r, 100 * wilson_hi(r - hits, r))
        elif lf:
            note = "first leak after %d requests (median)" % lf[len(lf) // 2]
        oc = ", ".join("%s %d" % (k, v) for k, v in sorted(outcomes.items(), key=lambda kv: -kv[1]))
        print("| %s | %s | %d (%d) | %d of %d | %s | %s |" % (name, want, n, reqs, hits, r, oc, note))
    if a.out:
        with open(a.out, "x") as f:
            json.dump(runs, f, indent=1)


if __name__ == "__main__":
    main()
