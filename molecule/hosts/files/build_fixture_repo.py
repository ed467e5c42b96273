# Copyright: (c) 2026, mindverse infrastructure team
# SPDX-License-Identifier: Apache-2.0
"""Build a signed local apt repository of STAND-IN packages laid out like AMD's.

AMD's repository cannot be reached from the test, so this script builds empty packages
that carry the real names (amdgpu-dkms, amd-smi-lib, ...) with dpkg-deb, indexes them the
way apt expects (Packages, Release, InRelease signed with a throw-away key made here) under

  <root>/amdgpu/<amdgpu version>/ubuntu/dists/<suite>/main/binary-<arch>/
  <root>/rocm/apt/<rocm version>/dists/<suite>/main/binary-<arch>/

and exports the public key as an ASCII-armored file. The packages contain a marker file and
no driver: they are fixtures, never to be installed outside a test container.

Usage: build_fixture_repo.py OUT_DIR ROCM_VERSION AMDGPU_VERSION SUITE ORIGIN
"""

import gzip
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time


def rocm_number(version):
    """6.4.3 -> 60403, the number AMD appends to its package versions."""
    major, minor, patch = (version.split(".") + ["0", "0"])[:3]
    return "%d%02d%02d" % (int(major), int(minor), int(patch))


def packages(rocm_version):
    num = rocm_number(rocm_version)
    return {
        "amdgpu": [
            ("amdgpu-dkms-firmware", "1:6.12.12.%s-fixture1" % num, ""),
            ("amdgpu-dkms", "1:6.12.12.%s-fixture1" % num, "amdgpu-dkms-firmware (= 1:6.12.12.%s-fixture1)" % num),
        ],
        "rocm": [
            ("rocm-core", "%s.%s-fixture1" % (rocm_version, num), ""),
            ("amd-smi-lib", "25.5.1.%s-fixture1" % num, "rocm-core"),
            ("rocm-smi-lib", "7.7.0.%s-fixture1" % num, "rocm-core"),
        ],
    }


def run(*argv, **kwargs):
    subprocess.run(argv, check=True, **kwargs)


def build_deb(pool, name, version, depends):
    work = tempfile.mkdtemp()
    try:
        os.makedirs(os.path.join(work, "DEBIAN"))
        doc = os.path.join(work, "usr/share/doc", name)
        os.makedirs(doc)
        with open(os.path.join(doc, "SGLANG_PD_FIXTURE"), "w") as handle:
            handle.write("Stand-in for %s %s built by the molecule scenario 'hosts'.\n" % (name, version))
        control = [
            "Package: %s" % name,
            "Version: %s" % version,
            "Architecture: all",
            "Maintainer: sglang-pd fixtures <fixtures@example.invalid>",
            "Section: misc",
            "Priority: optional",
        ]
        if depends:
            control.append("Depends: %s" % depends)
        control.append("Description: STAND-IN test fixture for %s" % name)
        control.append(" Carries the real package name and nothing else; no driver, no library.")
        with open(os.path.join(work, "DEBIAN/control"), "w") as handle:
            handle.write("\n".join(control) + "\n")
        deb = os.path.join(pool, "%s_%s_all.deb" % (name, version.split(":")[-1]))
        run("dpkg-deb", "--root-owner-group", "-Zgzip", "--build", work, deb, stdout=subprocess.DEVNULL)
        return deb
    finally:
        shutil.rmtree(work)


def digests(path):
    with open(path, "rb") as handle:
        data = handle.read()
    return len(data), hashlib.md5(data).hexdigest(), hashlib.sha256(data).hexdigest()


def index_repo(repo, suite, arch, origin, debs):
    binary = os.path.join(repo, "dists", suite, "main", "binary-%s" % arch)
    os.makedirs(binary, exist_ok=True)
    stanzas = []
    for deb in debs:
        control = subprocess.run(["dpkg-deb", "-f", deb], check=True, capture_output=True, text=True).stdout
        size, md5, sha256 = digests(deb)
        stanzas.append(
            control.rstrip("\n")
            + "\nFilename: %s\nSize: %d\nMD5sum: %s\nSHA256: %s\n" % (os.path.relpath(deb, repo), size, md5, sha256)
        )
    text = "\n".join(stanzas)
    with open(os.path.join(binary, "Packages"), "w") as handle:
        handle.write(text)
    with gzip.open(os.path.join(binary, "Packages.gz"), "wt") as handle:
        handle.write(text)
    dist = os.path.join(repo, "dists", suite)
    lines = [
        "Origin: %s" % origin,
        "Label: %s" % origin,
        "Suite: %s" % suite,
        "Codename: %s" % suite,
        "Date: %s" % time.strftime("%a, %d %b %Y %H:%M:%S UTC", time.gmtime()),
        "Architectures: %s" % arch,
        "Components: main",
        "Description: STAND-IN packages for the molecule scenario 'hosts'",
        "SHA256:",
    ]
    for name in ("Packages", "Packages.gz"):
        rel = "main/binary-%s/%s" % (arch, name)
        size, _md5, sha256 = digests(os.path.join(dist, rel))
        lines.append(" %s %d %s" % (sha256, size, rel))
    release = os.path.join(dist, "Release")
    with open(release, "w") as handle:
        handle.write("\n".join(lines) + "\n")
    run("gpg", "--batch", "--yes", "--clearsign", "-o", os.path.join(dist, "InRelease"), release)


def main():
    out, rocm_version, amdgpu_version, suite, origin = sys.argv[1:6]
    arch = subprocess.run(["dpkg", "--print-architecture"], check=True, capture_output=True, text=True).stdout.strip()
    os.environ["GNUPGHOME"] = os.path.join(out, "gnupg")
    os.makedirs(os.environ["GNUPGHOME"], mode=0o700, exist_ok=True)
    # One key signs every release the scenario publishes (the next one too, see side_effect.yml).
    known = subprocess.run(["gpg", "--batch", "--list-secret-keys", "fixtures@example.invalid"], capture_output=True, check=False)
    if known.returncode != 0:
        run("gpg", "--batch", "--passphrase", "", "--quick-gen-key",
            "sglang-pd fixtures <fixtures@example.invalid>", "ed25519", "sign", "never")
    repos = {
        "amdgpu": os.path.join(out, "repo", "amdgpu", amdgpu_version, "ubuntu"),
        "rocm": os.path.join(out, "repo", "rocm", "apt", rocm_version),
    }
    for kind, pkgs in packages(rocm_version).items():
        pool = os.path.join(repos[kind], "pool", "main")
        os.makedirs(pool, exist_ok=True)
        debs = [build_deb(pool, name, version, depends) for name, version, depends in pkgs]
        index_repo(repos[kind], suite, arch, origin, debs)
    with open(os.path.join(out, "fixture-key.asc"), "w") as handle:
        subprocess.run(["gpg", "--armor", "--export"], check=True, stdout=handle)


if __name__ == "__main__":
    main()
