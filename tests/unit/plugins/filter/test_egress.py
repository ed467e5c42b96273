"""egress_attempts: log lines that try to reach outside the fleet."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.mindverse.sglang_pd.plugins.filter.egress import egress_attempts

FLEET = ['172.30.57.11', '172.30.57.12', '172.30.57.1']
ROUTER_HUB_LINE = ('WARN smg::core::steps::worker::local::register_tokenizer: Failed to load tokenizer for model '
                   'glm-5.2-fp8 from /models/glm-5.2-fp8: Failed to download tokenizer from HuggingFace: error sending '
                   'request for url (https://huggingface.co/api/models//models/glm-5.2-fp8/revision/main)')


def test_the_routers_hub_download_is_found():
    assert egress_attempts('INFO start\n' + ROUTER_HUB_LINE + '\nINFO ready', FLEET) == [ROUTER_HUB_LINE]


@pytest.mark.parametrize('line', [
    'GET https://example.com/v2/ failed',
    'Error pulling image: Get "https://registry-1.docker.io/v2/": dial tcp: lookup: no such host',
    'connecting to http://10.9.9.9:30100/health',
    'loading from hf.co/THUDM/glm',
    'downloading https://[2001:db8::1]:443/x',
    # The code's own name does not hide a hub download on the same line.
    'INFO llm_tokenizer::huggingface: fetching tokenizer from the HuggingFace hub',
])
def test_a_url_outside_the_fleet_or_a_hub_word_is_found(line):
    assert egress_attempts(line, FLEET) == [line]


@pytest.mark.parametrize('line', [
    'error sending request for url (http://172.30.57.11:30100/health): connection refused',
    'Added worker http://172.30.57.12:30200 (decode)',
    'listening on http://0.0.0.0:30000 and http://127.0.0.1:29000/metrics',
    'pulled https://172.30.57.1:5443/v2/mindverse/sglang/manifests/sha256:ab',
    'Uvicorn running on http://[::1]:8000',
    'plain line without any address',
    # SMG's local tokenizer loader names its own code (a Rust module and source file), no hub.
    '2026-12-03 03:52:49 INFO llm_tokenizer::huggingface: crates/tokenizer/src/huggingface.rs:202: '
    'tokenizer encode path path=native',
])
def test_traffic_inside_the_fleet_is_not_found(line):
    assert egress_attempts(line, FLEET) == []


def test_limit_and_empty_input():
    assert len(egress_attempts('\n'.join(['https://example.com/'] * 50), FLEET, limit=3)) == 3
    assert egress_attempts(None, FLEET) == [] and egress_attempts('', FLEET) == []
    with pytest.raises(AnsibleFilterError):
        egress_attempts(['a list'], FLEET)
