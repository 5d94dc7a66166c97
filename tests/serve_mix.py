#!/usr/bin/env python3
"""serve_mix.py - the request mix of tests/serve_batch.sh and its checks.

    serve_mix.py plan SEED N OUT.json      N requests: shared prefixes (so
                                             prefix-cache hits), repeats,
                                             greedy and seeded sampling,
                                             streamed and not
    serve_mix.py send URL PLAN OUT.json CONC SEED
                                             send them, at most CONC at once,
                                             each after a random pause (random
                                             arrival), and keep every answer
    serve_mix.py same A.json B.json        every answer's ids in A are B's
    serve_mix.py traces DIR_A A.json DIR_B B.json K
                                             for K requests, the traces agree
                                             bit for bit: every step's logit
                                             snapshot, every decode step's
                                             tap statistics
Exit status 0 when the check holds; 1 with a line naming what differs."""
import json
import os
import random
import sqlite3
import sys
import threading
import time
import urllib.request

PREFIXES = [
    "Once upon a time there was a little girl named Lily. She loved to play outside in the sun with her dog. ",
    "The old man walked to the river every morning. He looked at the water and smiled at the fish. ",
    "Tom had a red ball and a blue car. One day he went to the park with his mom and his friend Sam. ",
]
ENDS = ["Then", "One day", "She said", "The dog", "After that", "But", "So they", "In the end"]


def plan(seed, n, out):
    rng = random.Random(seed)
    reqs = []
    for i in range(n):
        if i >= 4 and rng.random() < 0.25:
            r = dict(reqs[rng.randrange(len(reqs))])      # a repeat: the whole prompt is cached
            r["key"] = "r%d" % i
        else:
            p = PREFIXES[rng.randrange(len(PREFIXES))] + rng.choice(ENDS)
            if rng.random() < 0.3:
                p = p * 2                                   # a longer prompt: more full blocks
            r = {"key": "r%d" % i, "body": {"prompt": p, "max_tokens": rng.randint(3, 20)}}
            if rng.random() < 0.3:
                r["body"].update({"temperature": 0.9, "seed": rng.randint(1, 1000)})
            r["stream"] = rng.random() < 0.35
        reqs.append(r)
    json.dump(reqs, open(out, "w"), indent=1)


def post(url, body, stream):
    b = dict(body)
    if stream:
        b["stream"] = True
    req = urllib.request.Request(url + "/v1/completions", data=json.dumps(b).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as f:
        rid = f.headers.get("x-request-id")
        raw = f.read().decode()
    if not stream:
        j = json.loads(raw)
        return rid, j["choices"][0]["text"], j["bangtrace"]["completion_ids"], j["choices"][0]["finish_reason"]
    text, ids, fin = "", None, None
    for line in raw.split("\n"):
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        c = json.loads(line[6:])
        text += c["choices"][0].get("text", "")
        fin = c["choices"][0].get("finish_reason") or fin
        bt = c.get("bangtrace") or {}
        if "completion_ids" in bt:
            ids = bt["completion_ids"]
    return rid, text, ids, fin


def run_all(jobs, conc, out, res):
    """Run the callables jobs, at most conc at once; each returns a dict of
    answers or raises. The answers go to out; 0, or 1 with the failures."""
    sem = threading.Semaphore(conc)
    errs = []
    lock = threading.Lock()

    def one(job):
        try:
            got = job()
            with lock:
                res.update(got)
        except Exception as e:  # noqa: BLE001 - every failure is reported
            with lock:
                errs.append(str(e))
        finally:
            sem.release()

    ts = []
    for job in jobs:
        sem.acquire()
        t = threading.Thread(target=one, args=(job,))
        t.start()
        ts.append(t)
    for t in ts:
        t.join()
    json.dump(res, open(out, "w"), indent=1)
    if errs:
        print("failed requests: " + "; ".join(errs[:3]))
        return 1
    return 0


def answer(rid, text, ids, fin):
    return {"request_id": rid, "text": text, "ids": ids, "finish": fin}


def send(url, plan_path, out, conc, seed):
    reqs = json.load(open(plan_path))
    rng = random.Random(seed)
    pauses = [rng.random() * 0.05 for _ in reqs]

    def job(i, r):
        def run():
            time.sleep(pauses[i])
            try:
                return {r["key"]: answer(*post(url, r["body"], r.get("stream", False)))}
            except Exception as e:  # noqa: BLE001
                raise RuntimeError("%s: %s" % (r["key"], e))
        return run

    return run_all([job(i, r) for i, r in enumerate(reqs)], conc, out, {})


def chain(url, out, conc):
    def convo(i):
        def run():
            got = {}
            p = PREFIXES[i % len(PREFIXES)] + ENDS[i % len(ENDS)]
            try:
                for t in range(3):
                    a = answer(*post(url, {"prompt": p, "max_tokens": 6 + 2 * t}, t == 1))
                    got["c%dt%d" % (i, t)] = a
                    p = p + a["text"] + " " + ENDS[(i + t + 1) % len(ENDS)]
            except Exception as e:  # noqa: BLE001
                raise RuntimeError("conversation %d: %s" % (i, e))
            return got
        return run

    return run_all([convo(i) for i in range(6)], conc, out, {})


def same(a_path, b_path):
    a, b = json.load(open(a_path)), json.load(open(b_path))
    if set(a) != set(b):
        print("different requests answered: %s" % sorted(set(a) ^ set(b))[:5])
        return 1
    bad = [k for k in a if a[k]["text"] != b[k]["text"] or (a[k]["ids"] is not None and b[k]["ids"] is not None
                                                           and a[k]["ids"] != b[k]["ids"])]
    if bad:
        k = bad[0]
        print("%d of %d answers differ, e.g. %s: %r vs %r" % (len(bad), len(a), k, a[k]["text"][:60], b[k]["text"][:60]))
        return 1
    print("%d answers identical" % len(a))
    return 0


def rows(path, sql):
    c = sqlite3.connect("file:%s?mode=ro" % path, uri=True)
    try:
        return c.execute(sql).fetchall()
    finally:
        c.close()


def traces(da, a_path, db, b_path, k):
    a, b = json.load(open(a_path)), json.load(open(b_path))
    keys = sorted(a)[:k]
    for key in keys:
        ta = os.path.join(da, a[key]["request_id"] + ".db")
        tb = os.path.join(db, b[key]["request_id"] + ".db")
        for t in (ta, tb):
            if not os.path.exists(t):
                print("%s: no trace %s" % (key, t))
                return 1
        q = "SELECT step, pos, nan, max, entropy, topk_ids, topk_vals, chosen FROM logits ORDER BY step"
        la, lb = rows(ta, q), rows(tb, q)
        if la != lb or not la:
            print("%s: logit snapshots differ (%d vs %d rows)" % (key, len(la), len(lb)))
            return 1
        q = "SELECT step, hex(stats) FROM tap_blobs WHERE step >= 1 ORDER BY step"
        sa, sb = rows(ta, q), rows(tb, q)
        if sa != sb:
            print("%s: decode tap statistics differ" % key)
            return 1
    print("%d request traces agree bit for bit" % len(keys))
    return 0


def drawn(d, fault, bt, batched=None, alone=None):
    import glob
    import subprocess
    fired, named = set(), set()
    traces = sorted(glob.glob(os.path.join(d, "req-*.db")))
    for t in traces:
        rid = os.path.basename(t)[:-3]
        if rows(t, "SELECT count(*) FROM kv_access WHERE note LIKE '%s:%%'" % fault)[0][0]:
            fired.add(rid)
        out = subprocess.run([bt, "bisect", t], capture_output=True, text=True).stdout
        prov = [ln for ln in out.split("\n") if ln.startswith("cache provenance:")]
        if prov and fault + ":" in prov[0]:
            named.add(rid)
    if not fired:
        print("%s never fired in %d requests" % (fault, len(traces)))
        return 1
    if named != fired:
        print("bisect named %s in %s, it fired for %s" % (fault, sorted(named - fired)[:3], sorted(fired - named)[:3]))
        return 1
    clean = 0
    if batched:
        a, b = json.load(open(batched)), json.load(open(alone))
        for k, v in a.items():
            if v["request_id"] in fired:
                continue
            if v["text"] != b[k]["text"]:
                print("%s: %s did not fire for it, yet its answer is not the one it gets alone" % (k, fault))
                return 1
            clean += 1
    print("%s fired for %d of %d interleaved requests; bisect names it in exactly those%s" % (
        fault, len(fired), len(traces), "; the other %d answers are the ones they get alone" % clean if batched else ""))
    return 0


def main(argv):
    if len(argv) < 2:
        print(__doc__)
        return 2
    cmd = argv[1]
    if cmd == "plan":
        plan(int(argv[2]), int(argv[3]), argv[4])
        return 0
    if cmd == "send":
        return send(argv[2], argv[3], argv[4], int(argv[5]), int(argv[6]))
    if cmd == "chain":
        return chain(argv[2], argv[3], int(argv[4]))
    if cmd == "drawn":
        return drawn(argv[2], argv[3], argv[4], *(argv[5:7] if len(argv) > 6 else []))
    if cmd == "same":
        return same(argv[2], argv[3])
    if cmd == "traces":
        return traces(argv[2], argv[3], argv[4], argv[5], int(argv[6]))
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
