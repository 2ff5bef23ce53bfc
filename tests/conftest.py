# Make `ansible_collections.gpuhost.sglang` importable when pytest runs from a plain clone:
# collections/ansible_collections/gpuhost/sglang is a committed symlink to the repository root.
# The harness itself (paths, module runs, in-process calls, stand-ins) is tests/harness/.
import os
import sys

COLLECTIONS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "collections")
if os.path.isdir(COLLECTIONS) and COLLECTIONS not in sys.path:
    sys.path.insert(0, COLLECTIONS)
