# Make `ansible_collections.gpuhost.sglang` importable when pytest runs from a plain clone:
# collections/ansible_collections/gpuhost/sglang is a committed symlink to the repository root.
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COLLECTIONS = os.path.join(ROOT, "collections")
if COLLECTIONS not in sys.path:
    sys.path.insert(0, COLLECTIONS)
