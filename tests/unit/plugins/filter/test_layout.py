# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The collection's layout: service paths under sglang_service_config_dir, URLs with bracketed IPv6."""

from __future__ import annotations

import pathlib

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.mindverse.sglang_pd.plugins.filter import layout
from ansible_collections.mindverse.sglang_pd.plugins.module_utils import _layout


def test_service_files_live_under_etc_sglang_pd_by_default():
    assert layout.pd_service_files("sglang-router") == {
        "config_dir": "/etc/sglang-pd",
        "env": "/etc/sglang-pd/sglang-router.env", "workers_env": "/etc/sglang-pd/sglang-router.workers.env",
        "secret": "/etc/sglang-pd/sglang-router.secret.json", "script": "/etc/sglang-pd/sglang-router.sh",
        "gate": "/etc/sglang-pd/sglang-router.gate.nft", "unit": "/etc/systemd/system/sglang-router.service"}
    assert layout.pd_service_files("sglang-decode", None) == layout.pd_service_files("sglang-decode", "")


def test_service_files_follow_the_config_dir():
    files = layout.pd_service_files("sglang-decode-1", "/srv/pd/etc/")
    assert files["config_dir"] == "/srv/pd/etc"
    assert files["env"] == "/srv/pd/etc/sglang-decode-1.env"
    assert files["unit"] == "/etc/systemd/system/sglang-decode-1.service"


@pytest.mark.parametrize("name, config_dir", [("../etc/passwd", None), ("", None), ("..", None), ("sglang-router", "etc/pd")])
def test_a_name_or_config_dir_that_would_leave_the_layout_is_refused(name, config_dir):
    with pytest.raises(AnsibleFilterError, match="pd_service_files"):
        layout.pd_service_files(name, config_dir)


@pytest.mark.parametrize("address, url", [
    ("10.0.0.4", "http://10.0.0.4:30000"),
    ("fd00:57::4", "http://[fd00:57::4]:30000"),
    ("[fd00:57::4]", "http://[fd00:57::4]:30000"),
    ("router-0.example", "http://router-0.example:30000"),
])
def test_an_ipv6_address_is_bracketed_in_a_url(address, url):
    assert layout.pd_http_url(address, "30000") == url


def test_a_port_that_is_no_number_is_refused():
    with pytest.raises(AnsibleFilterError, match="pd_http_url"):
        layout.pd_http_url("10.0.0.4", "http")


def test_an_image_reference_is_built_and_read_back_the_same_way():
    digest = "sha256:" + "ab" * 32
    reference = layout.image_reference("registry.local:5000/sglang-pd", digest)
    assert reference == f"registry.local:5000/sglang-pd@{digest}"
    assert layout.image_digest(reference) == digest
    assert layout.image_digest(reference, "registry.local:5000/sglang-pd") == digest
    # Another repository's image, a tag, nothing at all: no digest of ours.
    assert layout.image_digest(reference, "registry.local:5000/other") == ""
    assert layout.image_digest("registry.local:5000/sglang-pd:latest") == ""
    assert layout.image_digest(None) == ""
    with pytest.raises(AnsibleFilterError, match="sglang_pd_image_digest"):
        layout.image_reference("registry.local:5000/sglang-pd", "")


def test_the_roles_and_variable_prefixes_are_those_of_the_roles_folder():
    roles_dir = pathlib.Path(__file__).resolve().parents[4] / "roles"
    assert _layout.ROLES == tuple(sorted(path.name for path in roles_dir.iterdir() if path.is_dir()))
    assert set(_layout.VARIABLE_PREFIXES) == {f"{role}_" for role in _layout.ROLES} | {"sglang_pd_"}
