#!/usr/bin/env python3
"""A model of realistic size for the lent H200, made there from a config (no weights travel, no hub), so that SGLang's
serving is bound by the GPU and not by its scheduler's CPU: the tiny model's tokenizer, probe set and training
(tests/fixtures/tinymodel.py: build_tokenizer, train, evaluate, save; one function for both models), at a larger
shape, trained on the GPU until it answers the project's coherence probes, saved in Hugging Face format (bf16).

    python3 benchmarks/gpu/sglang/gpubound_model.py --out DIR [--layers 64 --train-layers 16 --steps 400 ...]
    python3 benchmarks/gpu/sglang/gpubound_model.py --check DIR      load DIR from disk, answer the probes greedily
    OUT=... bash benchmarks/gpu/sglang/device.sh gpubound [ARGS]    on the machine: build (once), then start SGLang

The size chosen, and why (every figure here is unverified until run on the H200):
- Shape: Llama-3-8B's layer (hidden 4096, MLP 14336, 32 query and 8 KV heads of 128; the public config of
  meta-llama/Meta-Llama-3-8B), 64 layers, the embedding padded to 32768 rows (the tokenizer has 384 tokens; padded
  vocabularies are usual: Qwen2's and Qwen3's public config.json declare vocab_size 151936, more rows than their
  tokenizers' ids): 14.2 B parameters, 28.4 GB in bf16. The H200 has 141 GB of HBM3e at 4.8 TB/s (NVIDIA's H200
  product page): weights and a 65536-token KV cache (256 KiB a token at 64 layers x 8 KV heads x 128 x 2 x bf16,
  16 GiB) use about a third of it.
- GPU-bound: a decode step reads every weight once, >= 28.4 GB / 4.8 TB/s = 5.9 ms at any batch up to ~200, and at
  c=256 does ~7.3 TFLOP (2 x 14.2 B x 256), ~15 ms at half of the H200's 989 dense bf16 TFLOPS. The tiny model's
  steps cost the host 2.8-3.5 ms at c=1 and ~9 ms at c=256 (benchmarks/results/2026-12-03-h200-sglang0517-explain-
  gap-summary.txt: TPOT p50), so the GPU's share of a step should be about 2x the host's at c=1 and 1.5x at c=256:
  expected GPU busy share (NVML utilization) >= 90% at c >= 16, unverified until run.
- Training: only the first ``--train-layers`` (16: 3.7 B parameters, fp32 masters with AdamW states, 16 bytes a
  parameter = 59 GB, bf16 autocast) are trained on the probe set, until the probes pass (checked every 25 steps once
  the loss is below 0.05); the other 48 layers are added after training with
  their output projections (o_proj, down_proj) zero, so each adds exactly nothing to the residual stream: the answers
  are the trained model's, while every layer's attention, MLP matmuls and KV cache cost the GPU what a dense 14 B
  model's do (dense kernels do not skip zeros). Training the full 64 layers would need 227 GB. Expected ~0.1 s a
  step, at most 400 steps or 300 s; unverified until run.
Writes DIR (config.json, model.safetensors shards, tokenizer, generation config) and DIR/gpubound-manifest.json
(the arguments, sizes, training seconds, final loss, the probes' answers). A DIR whose manifest has the same
arguments and every probe right is kept (a second call on the same machine costs nothing).
"""
import argparse
import gc
import hashlib
import importlib.util
import json
import os
import shutil
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
TRAINER = os.path.join(ROOT, "tests", "fixtures", "tinymodel.py")
MANIFEST = "gpubound-manifest.json"
DEFAULTS = {"hidden": 4096, "intermediate": 14336, "heads": 32, "kv_heads": 8, "head_dim": 128, "layers": 64,
            "train_layers": 16, "vocab": 32768, "steps": 400, "lr": 3e-4, "probe_below_loss": 0.05, "probe_every": 25,
            "max_train_s": 300.0,
            "device": "cuda", "save_dtype": "bfloat16"}


def load_trainer():
    """tests/fixtures/tinymodel.py, by path (the tiny model's tokenizer, probes, training and evaluation)."""
    spec = importlib.util.spec_from_file_location("gpuhost_tinymodel", TRAINER)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def parse(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    ap.add_argument("--out", help="model directory to write")
    ap.add_argument("--check", metavar="DIR", help="only load DIR from disk and answer the probes greedily")
    for key, val in DEFAULTS.items():
        ap.add_argument("--" + key.replace("_", "-"), type=type(val), default=val)
    ap.add_argument("--force", action="store_true", help="build again even if DIR's manifest matches")
    a = ap.parse_args(argv)
    if bool(a.out) == bool(a.check):
        ap.error("give exactly one of --out DIR and --check DIR")
    bad = [(k, getattr(a, k)) for k in ("hidden", "intermediate", "heads", "kv_heads", "head_dim", "layers",
                                        "train_layers", "steps", "probe_every") if getattr(a, k) < 1]
    if bad:
        ap.error("--%s=%s: must be at least 1" % (bad[0][0].replace("_", "-"), bad[0][1]))
    if a.train_layers > a.layers:
        ap.error("--train-layers=%d: must be at most --layers (%d)" % (a.train_layers, a.layers))
    if a.heads % a.kv_heads:
        ap.error("--kv-heads=%d: must divide --heads (%d)" % (a.kv_heads, a.heads))
    if a.save_dtype not in ("bfloat16", "float32"):
        ap.error("--save-dtype=%s: allowed bfloat16, float32" % a.save_dtype)
    return a


def settings(a):
    return dict((k, getattr(a, k)) for k in DEFAULTS)


def inputs_key(a):
    """What the model depends on: the arguments, this script and the trainer."""
    h = hashlib.sha256(json.dumps(settings(a), sort_keys=True).encode())
    for path in (os.path.abspath(__file__), TRAINER):
        with open(path, "rb") as f:
            h.update(f.read())
    return h.hexdigest()


def size_of(a, layers):
    return {"hidden_size": a.hidden, "intermediate_size": a.intermediate, "num_hidden_layers": layers,
            "num_attention_heads": a.heads, "num_key_value_heads": a.kv_heads, "head_dim": a.head_dim}


def add_passthrough_layers(model, total):
    """Grow ``model`` to ``total`` decoder layers; each new layer's o_proj and down_proj are zero, so its attention
    and MLP are computed and add exactly 0 to the residual stream (the model's answers do not change)."""
    import torch
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer

    p = next(model.parameters())
    have = len(model.model.layers)
    model.config.num_hidden_layers = total
    if getattr(model.config, "layer_types", None):
        model.config.layer_types = [model.config.layer_types[0]] * total
    for idx in range(have, total):
        layer = LlamaDecoderLayer(model.config, layer_idx=idx).to(device=p.device, dtype=p.dtype)
        with torch.no_grad():
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        model.model.layers.append(layer)
    return model


def build(a, say):
    import torch

    tm = load_trainer()
    probes = tm.load_probes()
    tok = tm.build_tokenizer(probes)
    if a.vocab < len(tok):
        sys.exit("gpubound_model: --vocab=%d: must be at least the tokenizer's %d tokens" % (a.vocab, len(tok)))
    config = tm.model_config(tok, size_of(a, a.train_layers), vocab_size=a.vocab)
    on_gpu = a.device.startswith("cuda")
    probed = []

    def stop(model, step, loss):
        """Once the loss is below --probe-below-loss, every --probe-every steps: do the probes pass (greedy)?"""
        if loss >= a.probe_below_loss or step % a.probe_every:
            return False
        model.eval()
        acc, _answers = tm.evaluate(model, tok, probes)
        model.train()
        probed.append([step, round(loss, 4), acc["correct"]])
        say("step %d loss %.4f: %d/%d probes" % (step, loss, acc["correct"], acc["total"]))
        return acc["correct"] == acc["total"]

    model, seconds, loss, n_examples, steps = tm.train(
        tok, probes, config=config, steps=a.steps, lr=a.lr, device=a.device,
        autocast=torch.bfloat16 if on_gpu else None, fused=True if on_gpu else None, stop=stop,
        max_seconds=a.max_train_s, say=say)
    trained = sum(p.numel() for p in model.parameters())
    model.to(getattr(torch, a.save_dtype))
    gc.collect()  # the optimizer's states (two fp32 copies of the trained weights) go with their last references
    if on_gpu:
        torch.cuda.empty_cache()
    add_passthrough_layers(model, a.layers)
    acc, answers = tm.evaluate(model, tok, probes)
    return tm, tok, model, {"training_seconds": round(seconds, 2), "steps_run": steps, "final_loss": loss,
                            "examples": n_examples, "trained_parameters": trained, "probed": probed,
                            "parameters": sum(p.numel() for p in model.parameters()),
                            "probe_accuracy": acc, "answers": answers}


def check(path):
    """Load ``path`` as saved and answer the probes greedily: the accuracy dict and the answers."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tm = load_trainer()
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    model = AutoModelForCausalLM.from_pretrained(path, dtype="auto").to(dev)
    model.eval()
    tok = AutoTokenizer.from_pretrained(path)
    acc, answers = tm.evaluate(model, tok, tm.load_probes())
    zero = [i for i, layer in enumerate(model.model.layers)
            if not layer.self_attn.o_proj.weight.any() and not layer.mlp.down_proj.weight.any()]
    return {"model": path, "device": dev, "dtype": str(next(model.parameters()).dtype),
            "layers": model.config.num_hidden_layers, "passthrough_layers": zero,
            "vocab_size": model.config.vocab_size, "parameters": sum(p.numel() for p in model.parameters()),
            "probe_accuracy": acc, "answers": answers}


def manifest_ok(out, key):
    try:
        with open(os.path.join(out, MANIFEST)) as f:
            m = json.load(f)
    except (OSError, ValueError):
        return False
    acc = m.get("probe_accuracy") or {}
    return m.get("inputs_key") == key and acc.get("correct") == acc.get("total") and acc.get("total")


def main(argv=None):
    a = parse(argv)
    try:
        import torch
        import transformers
    except ImportError as exc:
        sys.exit("gpubound_model: %s; run this with a Python that has torch and transformers" % exc)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    transformers.utils.logging.disable_progress_bar()

    def say(line):
        print("gpubound_model: %s" % line, flush=True)

    if a.check:
        res = check(a.check)
        print(json.dumps(res, indent=1))
        return 0 if res["probe_accuracy"]["correct"] == res["probe_accuracy"]["total"] else 1
    out = os.path.abspath(a.out)
    key = inputs_key(a)
    if not a.force and manifest_ok(out, key):
        say("up to date (%s)" % out)
        return 0
    if a.device.startswith("cuda") and not torch.cuda.is_available():
        sys.exit("gpubound_model: --device=%s: no CUDA device here (allowed: cuda, cpu)" % a.device)
    wall = time.monotonic()
    tmp = out + ".tmp-%d" % os.getpid()
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tm, tok, model, facts = build(a, say)
        acc = facts["probe_accuracy"]
        if acc["correct"] != acc["total"]:
            sys.stderr.write(json.dumps(facts["answers"], indent=1) + "\n")
            sys.exit("gpubound_model: the trained model answers %d/%d probes after %d steps (loss %.4f); not writing %s "
                     "(more --steps, or another --lr)" % (acc["correct"], acc["total"], facts["steps_run"],
                                                          facts["final_loss"], out))
        t = time.monotonic()
        tm.save(model, tok, tmp)
        facts["save_seconds"] = round(time.monotonic() - t, 2)
        facts.update(inputs_key=key, settings=settings(a), wall_seconds=round(time.monotonic() - wall, 2),
                     versions={"torch": torch.__version__, "transformers": transformers.__version__},
                     device_name=torch.cuda.get_device_name(0) if a.device.startswith("cuda") else "cpu")
        with open(os.path.join(tmp, MANIFEST), "w") as f:
            json.dump(facts, f, indent=1, sort_keys=True)
        shutil.rmtree(out, ignore_errors=True)
        os.rename(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    say("%s: %d layers (%d trained), %.2f B parameters, trained %d steps in %.1f s (loss %.4f), saved in %.1f s, "
        "probes %s" % (out, a.layers, a.train_layers, facts["parameters"] / 1e9, facts["steps_run"],
                       facts["training_seconds"], facts["final_loss"], facts["save_seconds"], acc["per_form"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
