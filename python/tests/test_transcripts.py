"""The conversation transcripts of tests/vectors/transcripts/, replayed through the package's
session by tests/vectors/spec_peer.py (the CTest test wire_spec_peer runs the same)."""

import importlib.util
import os

import pytest
from conftest import VECTORS

spec = importlib.util.spec_from_file_location("spec_peer", os.path.join(VECTORS, "spec_peer.py"))
spec_peer = importlib.util.module_from_spec(spec)
spec.loader.exec_module(spec_peer)

NAMES = sorted(f for f in os.listdir(os.path.join(VECTORS, "transcripts")) if f.endswith(".txt"))


@pytest.mark.parametrize("bytewise", [False, True], ids=["whole", "bytewise"])
@pytest.mark.parametrize("name", NAMES)
def test_transcript(name, bytewise):
    spec_peer.replay(os.path.join(VECTORS, "transcripts", name), bytewise)
