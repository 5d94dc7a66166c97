#!/usr/bin/env python3
"""contam_server.py - a small OpenAI-compatible server that contaminates on
purpose, for tests/probe_contam.sh (probe --contamination).

    contam_server.py --port P --mode MODE [--seed S] [--leak-p P] [--rate P] [--drift-after N]

Answers are a deterministic function of the prompt (words drawn from its
SHA-256), and a prompt ending in "the code is" / "was" gets its own code
echoed, as a model copying from its prompt would. MODE says how it departs:

  clean        nothing: the answer depends on the prompt alone
  leak         with probability --leak-p (default 0.15) the answer ends with
               the tail of the prompt served just before it (another user's)
  order        the answer depends on the prompt served just before it, when
               that was another prompt
  prefix       the answer changes when the request served just before it
               shared its first 120 characters but was another prompt
               (a prefix cache handing out another request's blocks)
               --rate P (default 1) makes order, prefix and concurrency depart
               on that fraction of the answers they would change
  cache        a prompt served before gets another answer than the first
               time (a prefix cache whose entries are written or read
               wrong), the same every time after
  history      a state carried from request to request and never reset:
               an answer changes when the state left by everything served
               before says so (about a third of the answers)
  concurrency  the answer changes when another request was in flight while
               this one was served (graph reuse keyed on batch shape)
  drift        after --drift-after requests (default 150) an answer turns
               into a wall of '!' with a probability that grows to 1 over
               as many requests again (restart cures it)

POST /v1/completions and /v1/chat/completions; GET /health. Binds
127.0.0.1 only. Every request sleeps a few milliseconds, so requests sent
together are in flight together.
"""
import argparse
import hashlib
import json
import random
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

WORDS = ("the old dog ran to a small house near green hills where children played with bright red kites "
         "and birds sang songs every morning while rain fell softly on quiet roads").split()
CODE = re.compile(r"[B-Z]{4}-[0-9]{4}")


def words_from(seed_text, n=10):
    h = hashlib.sha256(seed_text.encode()).digest()
    return " " + " ".join(WORDS[b % len(WORDS)] for b in h[:n])


class State:
    def __init__(self, args):
        self.args = args
        self.lock = threading.Lock()
        self.rng = random.Random(args.seed)
        self.prev = ""          # the prompt served last
        self.served = 0
        self.in_flight = 0
        self.seen = set()       # prompts served before (cache)
        self.state = hashlib.sha256()   # everything served so far (history)


def answer(state, prompt):
    a = state.args
    with state.lock:
        state.in_flight += 1
        peak = state.in_flight
    time.sleep(0.012 if a.mode == "concurrency" else 0.003)
    with state.lock:
        peak = max(peak, state.in_flight)
        state.in_flight -= 1
        prev = state.prev
        state.prev = prompt
        state.served += 1
        n = state.served
        draw = state.rng.random()
        hit = state.rng.random() < a.rate
        cached = prompt in state.seen
        state.seen.add(prompt)
        carried = state.state.hexdigest()
        state.state.update(prompt.encode() + b"\0")
    text = words_from(prompt)
    own = CODE.findall(prompt)
    if own and re.search(r"(code is|was)\s*$", prompt):
        text = " " + own[-1] + "." + text
    if a.mode == "leak" and prev and draw < a.leak_p:
        text += " " + prev[-80:]
    elif a.mode == "order" and hit and prev != prompt:
        text = words_from(prompt + "\0" + prev)
    elif a.mode == "prefix" and hit and prev and prev != prompt and prev[:120] == prompt[:120]:
        text = words_from(prompt + "\0cache")
    elif a.mode == "cache" and hit and cached:
        text = words_from(prompt + "\0cached")
    elif a.mode == "history" and hit and int(carried[:8], 16) % 3 == 0:
        text = words_from(prompt + "\0" + carried)
    elif a.mode == "concurrency" and hit and peak > 1:
        text = words_from(prompt + "\0batch")
    elif a.mode == "drift" and n > a.drift_after and draw < (n - a.drift_after) / a.drift_after:
        text = " " + "!" * 24
    return text


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def send(self, code, obj):
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == "/health":
            self.send(200, {"status": "ok"})
        else:
            self.send(404, {"error": {"message": "not found"}})

    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        try:
            req = json.loads(self.rfile.read(n))
        except ValueError:
            return self.send(400, {"error": {"message": "malformed JSON"}})
        chat = self.path == "/v1/chat/completions"
        if not chat and self.path != "/v1/completions":
            return self.send(404, {"error": {"message": "unknown path"}})
        if chat:
            msgs = req.get("messages") or []
            prompt = "\n".join(str(m.get("content", "")) for m in msgs)
        else:
            prompt = str(req.get("prompt", ""))
        text = answer(self.server.state, prompt)
        if chat:
            choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "length"}
        else:
            choice = {"index": 0, "text": text, "finish_reason": "length"}
        self.send(200, {"id": "x", "object": "chat.completion" if chat else "text_completion", "choices": [choice]})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--mode", choices=("clean", "leak", "order", "prefix", "cache", "history", "concurrency", "drift"), required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--leak-p", type=float, default=0.15)
    ap.add_argument("--rate", type=float, default=1.0)
    ap.add_argument("--drift-after", type=int, default=150)
    args = ap.parse_args()
    srv = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    srv.daemon_threads = True
    srv.state = State(args)
    srv.serve_forever()


if __name__ == "__main__":
    main()
