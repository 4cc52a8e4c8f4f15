import os
import sys

# The tests run against the package in this tree, installed or not.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
VECTORS = os.path.join(REPO, "tests", "vectors")
