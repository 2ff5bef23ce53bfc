# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Workload: prompts of a given length (exact token length with a tokenizer), dataset files, token counting."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import random

# Plain English words: without a tokenizer, one word is roughly one token for most BPE vocabularies.
WORDS = (
    "time year people way day man thing woman life child world school state family student group country "
    "problem hand part place case week company system program question work government number night point "
    "home water room mother area money story fact month lot right study book eye job word business issue "
    "side kind head house service friend father power hour game line end member law car city community name "
    "president team minute idea kid body information back parent face others level office door health person "
    "art war history party result change morning reason research girl guy moment air teacher force education "
    "river stone cloud garden window copper silver market bridge planet signal orange violet winter summer"
).split()


class TokenizerError(Exception):
    pass


def load_tokenizer(path):
    """A local HF tokenizer directory (or tokenizer.json file) -> object with encode(text)->ids,
    decode(ids)->text, vocab_size. Uses ``tokenizers`` if importable, else ``transformers``."""
    if not os.path.exists(path):
        raise TokenizerError("tokenizer path %s does not exist" % path)
    tj = path if path.endswith(".json") else os.path.join(path, "tokenizer.json")
    try:
        from tokenizers import Tokenizer  # pylint: disable=import-outside-toplevel
        if os.path.isfile(tj):
            tok = Tokenizer.from_file(tj)
            return _Wrap(lambda t: tok.encode(t, add_special_tokens=False).ids,
                         tok.decode, tok.get_vocab_size(), _specials(tok))
    except ImportError:
        pass
    try:
        from transformers import AutoTokenizer  # pylint: disable=import-outside-toplevel
    except ImportError:
        raise TokenizerError("option tokenizer needs the python package 'tokenizers' or 'transformers' "
                             "where the module runs")
    try:
        tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
    except Exception as e:  # pylint: disable=broad-except
        raise TokenizerError("cannot load tokenizer from %s: %s" % (path, e))
    return _Wrap(lambda t: tok.encode(t, add_special_tokens=False), tok.decode,
                 len(tok), set(getattr(tok, "all_special_ids", []) or []))


def _specials(tok):
    try:
        return set(i for t, i in tok.get_vocab(with_added_tokens=True).items()
                   if t.startswith("<") and t.endswith(">") or t.startswith("<|"))
    except Exception:  # pylint: disable=broad-except
        return set()


class _Wrap(object):
    def __init__(self, encode, decode, vocab_size, specials):
        self.encode = encode
        self.decode = decode
        self.vocab_size = vocab_size
        self.specials = specials

    def count(self, text):
        return len(self.encode(text)) if text else 0


def random_prompts(n, input_len, seed=0, tokenizer=None):
    """``n`` prompts. With a tokenizer: exactly ``input_len`` tokens each (random ids decoded and
    re-encoded until stable). Without: ``input_len`` random words. Returns (prompts, token counts or None)."""
    rnd = random.Random(seed)
    prompts = []
    counts = []
    for i in range(n):
        if tokenizer is None:
            prompts.append(" ".join(rnd.choice(WORDS) for dummy in range(input_len)))
            counts.append(None)
            continue
        text = _exact_prompt(tokenizer, input_len, rnd)
        prompts.append(text)
        counts.append(tokenizer.count(text))
    return prompts, counts


def _exact_prompt(tok, n, rnd):
    allowed = [i for i in range(tok.vocab_size) if i not in tok.specials]
    ids = [rnd.choice(allowed) for dummy in range(n)]
    text = tok.decode(ids)
    for dummy in range(8):
        got = tok.encode(text)
        if len(got) == n:
            return text
        if len(got) > n:
            got = got[:n]
        else:
            got = got + [rnd.choice(allowed) for dummy in range(n - len(got))]
        text = tok.decode(got)
    # fall back to words, trimmed/padded by tokens
    words = [rnd.choice(WORDS) for dummy in range(n)]
    text = " ".join(words)
    ids = tok.encode(text)[:n]
    return tok.decode(ids)


def load_dataset(path, n, seed=0):
    """Prompts from a file: JSONL with ``{"prompt": ...}`` (optionally ``"output_len"``) or
    ``{"messages": [...]}`` (last user message used), or a JSON list of strings/objects.
    Cycles when shorter than ``n``. Returns (prompts, output_lens or None per prompt)."""
    if not os.path.isfile(path):
        raise ValueError("dataset file %s does not exist" % path)
    with open(path, "r") as f:
        raw = f.read()
    items = []
    stripped = raw.lstrip()
    try:
        if stripped.startswith("["):
            items = json.loads(raw)
        else:
            items = [json.loads(line) for line in raw.splitlines() if line.strip()]
    except ValueError as e:
        raise ValueError("dataset file %s is neither JSONL nor a JSON list: %s" % (path, e))
    prompts = []
    outs = []
    for i, it in enumerate(items):
        if isinstance(it, str):
            prompts.append(it)
            outs.append(None)
        elif isinstance(it, dict) and isinstance(it.get("prompt"), str):
            prompts.append(it["prompt"])
            outs.append(it.get("output_len"))
        elif isinstance(it, dict) and isinstance(it.get("messages"), list) and it["messages"]:
            users = [m for m in it["messages"] if isinstance(m, dict) and m.get("role") == "user"]
            if not users:
                raise ValueError("dataset file %s: entry %d has no user message" % (path, i))
            prompts.append(str(users[-1].get("content")))
            outs.append(it.get("output_len"))
        else:
            raise ValueError("dataset file %s: entry %d needs a string, 'prompt' or 'messages'" % (path, i))
    if not prompts:
        raise ValueError("dataset file %s has no prompts" % path)
    rnd = random.Random(seed)
    order = list(range(len(prompts)))
    rnd.shuffle(order)
    sel = [order[i % len(order)] for i in range(n)]
    return [prompts[i] for i in sel], [outs[i] for i in sel]
