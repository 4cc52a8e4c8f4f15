"""A PEP 517 build backend in the standard library alone, for `pip install ./python`.

setuptools before 70.1 cannot build a wheel without the `wheel` package, which a fresh virtual
environment lacks (Debian 12's setuptools is 66, pyenv's 3.11 ships 65) and which these machines
cannot download; this backend writes the wheel (and the sdist) with zipfile and tarfile, from the
metadata in pyproject.toml. The package is pure Python: a wheel is its files, the metadata and a
RECORD of hashes.
"""

import base64
import hashlib
import io
import os
import tarfile
import tomllib
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _project():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)["project"]


def _dist_name(p):
    return p["name"].replace("-", "_")


def _metadata(p):
    lines = ["Metadata-Version: 2.1", "Name: %s" % p["name"], "Version: %s" % p["version"],
             "Summary: %s" % p.get("description", ""), "Requires-Python: %s" % p.get("requires-python", "")]
    lines += ["Classifier: %s" % c for c in p.get("classifiers", [])]
    text = "\n".join(lines) + "\n"
    readme = p.get("readme")
    if readme:
        with open(os.path.join(ROOT, readme), encoding="utf-8") as f:
            text += "Description-Content-Type: text/markdown\n\n" + f.read()
    return text


def _package_files():
    out = []
    for folder, dirs, files in os.walk(os.path.join(ROOT, "courier_rpc")):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            if name.endswith(".py"):
                full = os.path.join(folder, name)
                out.append((os.path.relpath(full, ROOT).replace(os.sep, "/"), full))
    return out


def _dist_info(p):
    info = "%s-%s.dist-info" % (_dist_name(p), p["version"])
    files = {info + "/METADATA": _metadata(p).encode(),
             info + "/WHEEL": b"Wheel-Version: 1.0\nGenerator: courier_rpc_build\nRoot-Is-Purelib: true\n"
                              b"Tag: py3-none-any\n"}
    scripts = p.get("scripts", {})
    if scripts:
        files[info + "/entry_points.txt"] = ("[console_scripts]\n" + "".join(
            "%s = %s\n" % kv for kv in scripts.items())).encode()
    return info, files


def _write_wheel(wheel_directory, p, contents):
    info, files = _dist_info(p)
    files = dict(contents, **files)
    name = "%s-%s-py3-none-any.whl" % (_dist_name(p), p["version"])
    record = []
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w", zipfile.ZIP_DEFLATED) as z:
        for arc, data in files.items():
            z.writestr(arc, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append("%s,sha256=%s,%d" % (arc, digest, len(data)))
        record.append(info + "/RECORD,,")
        z.writestr(info + "/RECORD", "\n".join(record) + "\n")
    return name


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    info, files = _dist_info(_project())
    for arc, data in files.items():
        path = os.path.join(metadata_directory, arc)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
    return info


prepare_metadata_for_build_editable = prepare_metadata_for_build_wheel


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    contents = {}
    for arc, full in _package_files():
        with open(full, "rb") as f:
            contents[arc] = f.read()
    return _write_wheel(wheel_directory, _project(), contents)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    """An editable install: a .pth file that puts this folder on sys.path."""
    p = _project()
    return _write_wheel(wheel_directory, p, {"__editable__.%s.pth" % _dist_name(p): (ROOT + "\n").encode()})


def build_sdist(sdist_directory, config_settings=None):
    p = _project()
    base = "%s-%s" % (_dist_name(p), p["version"])
    name = base + ".tar.gz"
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz", format=tarfile.PAX_FORMAT) as t:
        paths = ["pyproject.toml", p.get("readme", "README.md")] + [arc for arc, _ in _package_files()]
        paths += ["build_backend/courier_rpc_build.py"]
        for arc in paths:
            t.add(os.path.join(ROOT, arc), arcname=base + "/" + arc)
        info = tarfile.TarInfo(base + "/PKG-INFO")
        data = _metadata(p).encode()
        info.size = len(data)
        t.addfile(info, io.BytesIO(data))
    return name
