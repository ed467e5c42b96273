# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The peer registry's configuration (roles/sglang_image/templates/image-peer.yml.j2): credentials only toward the central registry."""

from __future__ import annotations

import json
import pathlib

import jinja2
import pytest
import yaml

TEMPLATES = pathlib.Path(__file__).resolve().parents[3] / "roles" / "sglang_image" / "templates"


def render(upstream, username="sglang", password="p@ss: 'word'"):
    environment = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), undefined=jinja2.StrictUndefined)
    environment.filters["to_json"] = json.dumps
    text = environment.get_template("image-peer.yml.j2").render(
        ansible_managed="managed", sglang_image_peer_upstream=upstream, __sglang_image_pull_username=username,
        __sglang_image_pull_password=password, __sglang_image_peer_cache="/var/cache/sglang-pd-image-peer",
        __sglang_image_peer_listen="10.0.0.5:5001",
        __sglang_image_peer_remote=upstream or "https://registry.example.com")
    return yaml.safe_load(text)


def test_a_node_that_reads_from_the_central_registry_holds_its_credentials():
    config = render("")
    assert config["proxy"] == {"remoteurl": "https://registry.example.com", "username": "sglang", "password": "p@ss: 'word'"}
    assert config["http"] == {"addr": "10.0.0.5:5001"}
    assert config["storage"]["filesystem"]["rootdirectory"] == "/var/cache/sglang-pd-image-peer"


@pytest.mark.parametrize("username", ["sglang", ""])
def test_a_node_that_reads_from_a_peer_holds_no_credentials(username):
    config = render("http://10.0.0.4:5001", username=username)
    assert config["proxy"] == {"remoteurl": "http://10.0.0.4:5001"}
    assert "auth" not in config


def test_no_login_no_credentials():
    assert render("", username="")["proxy"] == {"remoteurl": "https://registry.example.com"}
