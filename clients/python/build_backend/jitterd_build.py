"""A PEP 517 build backend for the jitterd client, standard library only.

pip builds a package in an isolated environment into which it installs the backend named in
pyproject.toml; setuptools would have to come from a package registry, which the machines jitterd
is tested on cannot reach. This backend needs nothing: it zips src/jitterd into a wheel (PEP 427)
with the metadata of pyproject.toml, and the sources into an sdist. It supports exactly what this
package needs: pure Python, one top-level package, an entry point group.
"""

import base64
import hashlib
import io
import os
import tarfile
import zipfile

try:
    import tomllib  # Python 3.11
except ImportError:  # pragma: no cover - Python 3.9 and 3.10
    tomllib = None

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCE = os.path.join(ROOT, "src")


def _project():
    """[project] of pyproject.toml (tomllib where it exists, else the few lines this file uses)."""
    path = os.path.join(ROOT, "pyproject.toml")
    with open(path, "rb") as f:
        text = f.read()
    if tomllib is not None:
        return tomllib.loads(text.decode())["project"]
    project, section = {"entry-points": {}}, None
    for raw in text.decode().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        key, _, value = (part.strip() for part in line.partition("="))
        value = value.strip('"')
        if section == "project" and key in ("name", "version", "description", "requires-python"):
            project[key] = value
        elif section and section.startswith("project.entry-points."):
            group = section[len("project.entry-points."):]
            project["entry-points"].setdefault(group, {})[key] = value
    return project


def _metadata(project):
    lines = [
        "Metadata-Version: 2.1",
        "Name: %s" % project["name"],
        "Version: %s" % project["version"],
        "Summary: %s" % project.get("description", ""),
        "Requires-Python: %s" % project.get("requires-python", ""),
    ]
    return "\n".join(lines) + "\n"


def _entry_points(project):
    out = []
    for group, entries in sorted(project.get("entry-points", {}).items()):
        out.append("[%s]" % group)
        out.extend("%s = %s" % (name, target) for name, target in sorted(entries.items()))
        out.append("")
    return "\n".join(out)


def _record_line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "%s,sha256=%s,%d" % (name, digest, len(data))


def _package_files():
    for folder, _, files in os.walk(os.path.join(SOURCE, "jitterd")):
        for name in sorted(files):
            if name.endswith((".py", ".typed")):
                path = os.path.join(folder, name)
                yield os.path.relpath(path, SOURCE).replace(os.sep, "/"), path


def _write_wheel(wheel_directory, files_extra=()):
    project = _project()
    dist = "%s-%s" % (project["name"], project["version"])
    wheel_name = "%s-py3-none-any.whl" % dist
    info = "%s.dist-info" % dist
    contents = [(arcname, open(path, "rb").read()) for arcname, path in _package_files()]
    contents.extend(files_extra)
    contents.append(("%s/METADATA" % info, _metadata(project).encode()))
    contents.append(("%s/entry_points.txt" % info, _entry_points(project).encode()))
    contents.append(
        ("%s/WHEEL" % info,
         b"Wheel-Version: 1.0\nGenerator: jitterd_build\nRoot-Is-Purelib: true\nTag: py3-none-any\n"))
    record = [_record_line(name, data) for name, data in contents]
    record.append("%s/RECORD,," % info)
    contents.append(("%s/RECORD" % info, ("\n".join(record) + "\n").encode()))
    with zipfile.ZipFile(os.path.join(wheel_directory, wheel_name), "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in contents:
            z.writestr(zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0)), data)
    return wheel_name


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return _write_wheel(wheel_directory)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    """An editable install (pip install -e): a .pth file that puts src/ on sys.path."""
    project = _project()
    # Only the .pth: the package itself stays where it is.
    global _package_files
    original = _package_files
    _package_files = lambda: iter(())  # noqa: E731
    try:
        return _write_wheel(wheel_directory,
                            files_extra=[("%s.pth" % project["name"], (SOURCE + "\n").encode())])
    finally:
        _package_files = original


def build_sdist(sdist_directory, config_settings=None):
    project = _project()
    dist = "%s-%s" % (project["name"], project["version"])
    name = "%s.tar.gz" % dist
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz") as tar:
        for folder in ("pyproject.toml", "README.md", "build_backend", "src"):
            path = os.path.join(ROOT, folder)
            if os.path.exists(path):
                tar.add(path, arcname="%s/%s" % (dist, folder),
                        filter=lambda info: None if "__pycache__" in info.name else info)
        data = _metadata(project).encode()
        info = tarfile.TarInfo("%s/PKG-INFO" % dist)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return name
