#!/usr/bin/env bash
# Builds the anchor client's venv (sglang 0.5.23's bench_serving, CPU only) under
# $GPUHOST_ROOT/.cache/anchor-venv. Idempotent: a stamp file marks a finished build.
# Recipe: the no-deps sglang wheel + the deps its import chain needs, real triton, a stand-in torchvision
# (as tests/fixtures/sglang-venv.sh does for the parser venv). ~2.8 GB.
set -euo pipefail
GPUHOST_ROOT=${GPUHOST_ROOT:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$GPUHOST_ROOT"
VENV=.cache/anchor-venv
STAMP=$VENV/.gpuhost-anchor-0.5.23
if [ -e "$STAMP" ]; then exit 0; fi
export PIP_CACHE_DIR=$GPUHOST_ROOT/.cache/pip
python3 -m venv "$VENV"
"$VENV/bin/pip" install -q --upgrade pip
TORCH=torch==2.13.0
if ls /opt/wheels/torch-2.13.0*.whl >/dev/null 2>&1; then TORCH=$(ls /opt/wheels/torch-2.13.0*.whl | head -1); fi
"$VENV/bin/pip" install -q "$TORCH"
"$VENV/bin/pip" install -q --no-deps sglang==0.5.23
"$VENV/bin/pip" install -q numpy orjson psutil pybase64 requests packaging pillow starlette msgspec pydantic \
  pyzmq tqdm IPython aiohttp transformers datasets tokenizers triton apache-tvm-ffi sentencepiece \
  compressed-tensors gguf
# torchvision: the registry wheel is CUDA-linked and breaks imports; sglang's import chain needs the
# name only, so a stand-in synthesizes every torchvision.* module with inert placeholders.
SP=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
mkdir -p "$SP/torchvision"
cat > "$SP/torchvision/__init__.py" <<'PY'
"""Stand-in torchvision for the CPU anchor venv (the registry wheel is CUDA-linked): import-time only.
Every torchvision.* submodule is synthesized; every attribute is an inert placeholder class."""
import importlib.abc
import importlib.machinery
import sys
import types

__version__ = "0.28.0"


class _Meta(type):
    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return cls


class _Any(metaclass=_Meta):
    def __init__(self, *a, **kw):
        pass


def _module_getattr(name):
    if name.startswith("__"):
        raise AttributeError(name)
    return _Any


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path=None, target=None):
        if fullname.startswith("torchvision."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        m = types.ModuleType(spec.name)
        m.__path__ = []
        m.__getattr__ = _module_getattr
        return m

    def exec_module(self, module):
        pass


sys.meta_path.insert(0, _Finder())
__getattr__ = _module_getattr
PY
"$VENV/bin/python" -m sglang.bench_serving --help >/dev/null
touch "$STAMP"
