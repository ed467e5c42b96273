# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The support bundle's filters: which values are secret, each secret shape redacted, texts cut to size."""

from __future__ import annotations

import base64

import pytest

from ansible_collections.mindverse.sglang_pd.plugins.filter import support_bundle

SECRET = "s3cr3t-Value-0123456789"


@pytest.mark.parametrize("text, redacted", [
    ("Authorization: Bearer abcdefgh12345", "Authorization: <redacted>"),
    ('curl -H "authorization: Basic dXNlcjpwYXNzd29yZA=="', 'curl -H "authorization: <redacted>"'),
    ("Proxy-Authorization: token ghp_abcdef123456", "Proxy-Authorization: <redacted>"),
    ("sent bearer eyJhbGciOiJIUzI1NiJ9.payload.sig", "sent bearer <redacted>"),
    ("--api-key sk-abcdef123456 --port 30000", "--api-key <redacted> --port 30000"),
    ("--registry-password=hunter2hunter2", "--registry-password=<redacted>"),
    ("SGLANG_API_KEY=abc123xyz789", "SGLANG_API_KEY=<redacted>"),
    ("HF_TOKEN=hf_abcdefghijkl", "HF_TOKEN=<redacted>"),
    ("password: hunter22", "password: <redacted>"),
    ('{"api_key": "sk-live-123456", "port": 30000}', '{"api_key": "<redacted>", "port": 30000}'),
    ('{"key": "zzzzzzzzzzzz", "role": "admin"}', '{"key": "<redacted>", "role": "admin"}'),
    ("docker pull https://fleet:pa55word@registry.local/v2/", "docker pull https://fleet:<redacted>@registry.local/v2/"),
    ("GET https://blob.local/m/x?sv=2024&sig=abcdEFG%2Bhij&se=1", "GET https://blob.local/m/x?sv=2024&sig=<redacted>&se=1"),
    ("GET /v1/models?token=abcdef123456", "GET /v1/models?token=<redacted>"),
], ids=["authorization-bearer", "authorization-basic-json", "proxy-authorization", "bearer-anywhere", "flag-value",
        "flag-equals", "env-key", "env-token", "yaml-password", "json-api-key", "json-key", "url-password", "url-sig",
        "url-token"])
def test_each_secret_shape_is_redacted(text, redacted):
    assert support_bundle.support_redact(text) == redacted


@pytest.mark.parametrize("text", [
    "Decode batch. #running-req: 1, #token: 120, token usage: 0.01, gen throughput (token/s): 3.2",
    "--max-total-tokens 4096 --tokenizer-path /models/glm/tokenizer --skip-tokenizer-init",
    "GET /health_generate 200 OK",
    "max_tokens=16",
], ids=["sglang-log", "token-flags", "access-log", "count"])
def test_what_only_sounds_secret_is_kept(text):
    assert support_bundle.support_redact(text) == text


def test_the_values_of_secret_variables_are_redacted_anywhere():
    text = f"started with {SECRET} in the middle, and {SECRET}x"
    assert support_bundle.support_redact(text, [SECRET]) == "started with <redacted> in the middle, and <redacted>x"


def test_a_short_value_is_no_secret_to_look_for():
    assert support_bundle.support_redact("a b admin", ["admin", "b"]) == "a b admin"


def test_a_mapping_of_texts_is_redacted_text_by_text():
    assert support_bundle.support_redact({"a.log": f"x {SECRET}", "b.log": None}, [SECRET]) == {"a.log": "x <redacted>", "b.log": ""}


def test_the_secret_variables_are_the_no_log_and_secret_named_ones_and_secret_keys_inside_mappings():
    hostvars = {"h1": {
        "sglang_router_api_key": "router-key-123456",
        "sglang_model_source_url_query": "sig=abcdefabcdef",  # no_log in its argument spec; its name says nothing
        "sglang_pd_registry_password": "registry-password-1",
        "sglang_router_control_plane_api_keys": [{"name": "ops", "key": "cp-admin-key-1", "role": "admin"}],
        "sglang_worker_extra_env": {"HF_TOKEN": "hf_hub_token_123", "SGLANG_STANDIN_WARMUP_SECS": "3000000"},
        "sglang_pd_model_path": "/models/glm-5.2-fp8",
        "sglang_worker_tokenizer_path": "/models/glm-5.2-fp8/tokenizer",  # "token", but a tokenizer
        "fleet_hub_token": "not-a-collection-variable",  # the collection's variables only
        "sglang_pd_api_token": "abc",  # too short to look for
    }, "h2": {"sglang_worker_admin_api_key": "admin-key-1234567"}}
    assert set(support_bundle.support_secrets(["h1", "h2"], hostvars)) == {
        "router-key-123456", "sig=abcdefabcdef", "registry-password-1", "cp-admin-key-1", "hf_hub_token_123",
        "admin-key-1234567"}


def test_the_no_log_names_come_from_the_argument_specs():
    assert {"sglang_router_api_key", "sglang_pd_registry_password", "sglang_model_source_url_query"} <= support_bundle.no_log_names()


def test_a_text_is_cut_to_its_last_bytes_and_says_so():
    assert support_bundle.support_tail("short", 10) == "short"
    assert support_bundle.support_tail("0123456789abcdef", 6) == "[support bundle: the first 10 bytes cut, the last 6 kept]\nabcdef"


def test_a_missing_tool_is_said_to_be_absent_and_a_failing_one_keeps_its_output():
    results = [
        {"item": {"file": "amd-smi.txt", "argv": ["amd-smi", "metric"]}, "rc": 2, "msg": "Error executing command.",
         "stdout": "", "stderr": ""},
        {"item": {"file": "dmesg.txt", "argv": ["dmesg"]}, "rc": 1, "msg": "non-zero return code", "stdout": "",
         "stderr": "dmesg: read kernel buffer failed: Operation not permitted"},
    ]
    texts = support_bundle.support_command_texts(results)
    assert texts["amd-smi.txt"].startswith("$ amd-smi metric\nnot present on this node: amd-smi")
    assert texts["dmesg.txt"] == "$ dmesg\n(exit code 1)\n\n--- stderr\ndmesg: read kernel buffer failed: Operation not permitted\n"
    logs = support_bundle.support_command_texts([{"item": "sglang-decode", "cmd": ["docker", "logs", "sglang-decode"], "rc": 0,
                                                  "stdout": "ready", "stderr": ""}], "logs/", ".log")
    assert logs == {"logs/sglang-decode.log": "$ docker logs sglang-decode\n(exit code 0)\nready\n"}


def test_read_files_are_named_by_their_base_name_and_a_missing_one_says_so():
    results = [{"item": "/etc/sglang-pd/sglang-decode.sh", "content": base64.b64encode(b"#!/bin/sh\n").decode()},
               {"item": "/var/lib/sglang-pd/settled.json", "failed": True, "msg": "file not found"}]
    assert support_bundle.support_file_texts(results) == {
        "files/sglang-decode.sh": "#!/bin/sh\n",
        "files/settled.json.missing": "/var/lib/sglang-pd/settled.json: not read (file not found)\n"}


def test_a_result_is_shown_as_json_or_says_why_it_is_not_there():
    assert support_bundle.support_result_text({"workers": [{"url": "http://a:1"}]}, "workers") == '[\n  {\n    "url": "http://a:1"\n  }\n]\n'
    assert support_bundle.support_result_text({"skipped": True, "skip_reason": "no metrics port"}, "content") == "not read: no metrics port\n"
    assert support_bundle.support_result_text({"failed": True, "msg": "connection refused"}, "workers") == "not read: connection refused\n"
    assert support_bundle.support_docker_text({"failed": True, "msg": "no daemon"}) == "Docker not read: no daemon\n"
