# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of the preflight checks (plugins/plugin_utils/preflight/checks.py) on in-memory inventories.

The same checks run end to end through ansible-playbook in tests/integration/test_site_preflight.py.
"""

from __future__ import annotations

import pytest

from ansible_collections.mindverse.sglang_pd.plugins.plugin_utils.preflight import checks, inputs, model as preflight_model, router_rules
from ansible_collections.mindverse.sglang_pd.plugins.plugin_utils.preflight.problems import merge_problems
from preflight_engine import DEFAULTS, TEMPLAR, resolver, trusted

DIGEST = "sha256:" + "ab" * 32
IMAGE = {"sglang_pd_image_repository": "registry.example.com/mindverse/sglang", "sglang_pd_image_digest": DIGEST}


ALLOWLIST = checks.flag_table({"sglang_pd_sglang_version": "0.5.14"})[1].FLAGS


def inventory(**host_overrides):
    """A valid 1 prefill + 1 decode inventory (router on the decode node)."""
    common = {"sglang_pd_image_repository": "registry.example.com/mindverse/sglang", "sglang_pd_image_digest": DIGEST,
              "sglang_pd_model_path": "/models/m", "sglang_router_api_key": "k-unit"}
    hostvars = {
        "p0": dict(common, sglang_pd_service_address="10.0.0.1"),
        "d0": dict(common, sglang_pd_service_address="10.0.0.2"),
    }
    for host, values in host_overrides.items():
        hostvars.setdefault(host, dict(common)).update(values)
    groups = {"sglang_prefill": ["p0"], "sglang_decode": ["d0"], "sglang_router": ["d0"]}
    return groups, hostvars


def model_of(groups, hostvars):
    return preflight_model.pd_model(groups, hostvars, resolver())


def all_problems(groups, hostvars):
    model = model_of(groups, hostvars)
    return (merge_problems(model["errors"]) + checks.pd_check_names(model) + checks.pd_check_addresses(model, hostvars)
            + checks.pd_check_ports(model) + checks.pd_check_gpus(model, hostvars) + checks.pd_check_ib_devices(model)
            + checks.pd_check_flags(model, hostvars) + router_rules.pd_check_router(model)
            + checks.pd_check_image(hostvars, list(hostvars)) + checks.pd_check_worker_specs(hostvars, groups)
            + checks.pd_check_model_weights(hostvars, list(hostvars)))


def test_valid_inventory_passes_every_check():
    assert all_problems(*inventory()) == []


@pytest.mark.parametrize("default, variables, expected", [
    ("{{ sglang_pd_model_path }}", {"sglang_pd_model_path": "/m"}, "/m"),
    ("{{ sglang_pd_router_port | default(30000) }}", {}, 30000),
    ("{{ sglang_pd_router_port | default(30000) }}", {"sglang_pd_router_port": 31000}, 31000),
    ("{{ sglang_pd_served_model_name | default(None) }}", {}, None),
    ("{{ a }}@{{ b }}", {"a": "repo", "b": "sha256:1"}, "repo@sha256:1"),
    # Any template Ansible takes: the mini templating this replaced left these unresolved.
    ("{{ a | upper }}", {"a": "x"}, "X"),
    ("{{ [a, 1] | max }}", {"a": 3}, 3),
    ({"k": "{{ a }}"}, {"a": 1}, {"k": 1}),
    (8, {}, 8),
    ("{{ sglang_pd_image_repository | mindverse.sglang_pd.image_reference(sglang_pd_image_digest) }}",
     {"sglang_pd_image_repository": "r/s", "sglang_pd_image_digest": "sha256:" + "a" * 64}, "r/s@sha256:" + "a" * 64),
    ("{{ v | default([]) | mindverse.sglang_pd.volumes_holding(p) }}",
     {"v": ["/a:/models:ro", "/b:/root/.cache"], "p": "/models/glm"}, ["/a:/models:ro"]),
    ("{{ v | default([]) | mindverse.sglang_pd.volumes_holding(p) }}", {"p": "/models/glm"}, []),
])
def test_a_default_is_what_ansible_makes_of_it(default, variables, expected):
    values, errors = inputs.role_variables(TEMPLAR, variables, {"x_value": trusted(default)}, "x_", "h")
    assert errors == []
    assert values["x_value"] == expected


@pytest.mark.parametrize("default, variables, message", [
    ("{{ sglang_pd_image_repository | mindverse.sglang_pd.image_reference(sglang_pd_image_digest) }}",
     {"sglang_pd_image_repository": "r/s"}, "sglang_pd_image_digest"),
    ("{{ a | mindverse.sglang_pd.unknown_filter(b) }}", {"a": 1, "b": 2}, "unknown_filter"),
])
def test_a_default_that_cannot_be_templated_is_named_with_its_cause(default, variables, message):
    values, errors = inputs.role_variables(TEMPLAR, variables, {"x_value": trusted(default)}, "x_", "h")
    assert "x_value" not in values
    assert len(errors) == 1 and errors[0][0] == "h"
    assert errors[0][1].startswith("x_value cannot be evaluated: ") and message in errors[0][1], errors


def test_hosts_share_a_templated_default_only_when_it_reads_the_same_values():
    cache, seen = {}, {}
    for host, path, volumes in (("a", "/models/a", ["/n:/models:ro"]), ("b", "/models/b", ["/n:/models:ro"]),
                                ("c", "/models/a", ["/m:/models:ro", "/c:/root/.cache"]), ("d", "/models/a", ["/n:/models:ro"])):
        values, errors = inputs.role_variables(
            TEMPLAR, dict(IMAGE, sglang_pd_model_path=path, sglang_worker_volumes=volumes),
            DEFAULTS["sglang_router"], "sglang_router_", host, cache)
        assert errors == []
        seen[host] = (values["sglang_router_tokenizer_path"], values["sglang_router_volumes"])
    assert seen == {"a": ("/models/a", ["/n:/models:ro"]), "b": ("/models/b", ["/n:/models:ro"]),
                    "c": ("/models/a", ["/m:/models:ro"]), "d": ("/models/a", ["/n:/models:ro"])}


def test_role_vars_take_inventory_over_defaults():
    values, errors = inputs.role_variables(
        TEMPLAR, dict(IMAGE, sglang_worker_tp_size=4, sglang_worker_typo=1, sglang_pd_model_path="/m"),
        DEFAULTS["sglang_worker"], "sglang_worker_", "h")
    assert errors == []
    assert values["sglang_worker_tp_size"] == 4
    assert values["sglang_worker_model_path"] == "/m"
    assert values["sglang_worker_typo"] == 1
    assert values["sglang_worker_kv_cache_dtype"] == "fp8_e4m3"


def test_router_volumes_follow_the_tokenizer_default_resolved_before_them():
    values, errors = inputs.role_variables(
        TEMPLAR, dict(IMAGE, sglang_pd_model_path="/models/glm",
                      sglang_worker_volumes=["/nvme/models:/models:ro", "/nvme/cache:/root/.cache"]),
        DEFAULTS["sglang_router"], "sglang_router_", "h")
    assert errors == []
    assert values["sglang_router_tokenizer_path"] == "/models/glm"
    assert values["sglang_router_volumes"] == ["/nvme/models:/models:ro"]


@pytest.mark.parametrize("argv, expected", [
    (["--tp-size", "8"], []),
    (["--tp", "8"], ["write the whole flag --tp-size"]),
    (["--tensor-parallel-size", "8", "--tp-size", "8"], ["--tensor-parallel-size is already given"]),
    (["--kv-cache-dtype", "fp8"], ["not a valid choice", "did you mean fp8_e4m3 or fp8_e5m2"]),
    (["--trust-remote-code", "true"], ["a switch, it takes no value", "write trust_remote_code: true"]),
    (["--attention-backen", "aiter"], ["no such flag", "write the whole flag --attention-backend"]),
    (["--atention-backend", "aiter"], ["no such flag", "did you mean --attention-backend"]),
    (["--stream-output"], ["deprecated", "use --incremental-streaming-output"]),
    (["--page-size"], ["needs one value"]),
    (["8"], ["a value without a flag"]),
    (["--disaggregation-ib-device=mlx5_0"], []),
])
def test_check_argv(argv, expected):
    full = ["python", "-m", "sglang.launch_server"] + argv
    found = checks.check_argv(full, ["x"] * len(full), ALLOWLIST)
    text = " | ".join(f"{flag} {problem} {fix}" for _origin, flag, _value, problem, fix in found)
    if not expected:
        assert found == []
    for piece in expected:
        assert piece in text


def test_fork_flags_can_be_allowed():
    groups, hostvars = inventory(p0={"sglang_worker_prefill_options": {"enable_cp_layersplit": True}})
    problems = checks.pd_check_flags(model_of(groups, hostvars), hostvars)
    assert any("--enable-cp-layersplit" in p and "no such flag" in p for p in problems)
    hostvars["p0"]["sglang_pd_sglang_extra_flags"] = {"--enable-cp-layersplit": "switch"}
    assert checks.pd_check_flags(model_of(groups, hostvars), hostvars) == []
    hostvars["p0"]["sglang_pd_sglang_extra_flags"] = "--enable-cp-layersplit"
    assert checks.pd_check_flags(model_of(groups, hostvars), hostvars) == [
        "p0: sglang_pd_sglang_extra_flags = '--enable-cp-layersplit': a string, not a list of flags; "
        "write [--enable-cp-layersplit] (a YAML list) or a map of flag to kind"]


def test_unknown_sglang_version_is_refused():
    groups, hostvars = inventory(p0={"sglang_pd_sglang_version": "9.9.9"})
    problems = checks.pd_check_flags(model_of(groups, hostvars), hostvars)
    assert any("gen_sglang_allowlist.py --version 9.9.9" in p for p in problems)


def test_problems_on_several_hosts_are_merged():
    assert merge_problems([("a", "x"), ("b", "x"), ("a", "y")]) == ["a, b: x", "a: y"]


def test_variables_check_types_from_specs():
    specs = {"sglang_worker_trust_remote_code": {"type": "bool"}, "sglang_worker_tp_size": {"type": "int"},
             "sglang_worker_kv_cache_dtype": {"type": "str", "choices": ["auto", "fp8_e4m3"]}}
    hostvars = {"h": {"sglang_worker_trust_remote_code": "false", "sglang_worker_tp_size": "eight",
                      "sglang_worker_kv_cache_dtype": "fp8", "sglang_worker_tpsize": 8, "sglang_worker_env": {}}}
    problems = checks.pd_check_variables(hostvars, ["h"], specs, {"sglang_worker_env": "sglang_worker_extra_env"})
    text = "\n".join(problems)
    assert 'sglang_worker_trust_remote_code = "false": a string, not a boolean; write sglang_worker_trust_remote_code: false' in text
    assert "sglang_worker_tp_size = \"eight\": not an integer" in text
    assert "(did you mean fp8_e4m3?)" in text
    assert "sglang_worker_tpsize = 8: no role or playbook of this collection reads this variable; did you mean sglang_worker_tp_size?" in text
    assert "write sglang_worker_extra_env instead" in text


@pytest.mark.parametrize("spec, value, expected", [
    # What Ansible's ArgumentSpecValidator refuses.
    ({"type": "int"}, "eight", ("not an integer", None)),
    ({"type": "int"}, "8", None),
    ({"type": "float"}, "fast", ("not a number", None)),
    ({"type": "float"}, 0.5, None),
    ({"type": "bool", "switch": True}, "maybe", ("not a boolean (write true or false)", None)),
    ({"type": "bool", "switch": True}, "yes", None),
    ({"type": "str", "choices": ["auto", "fp8_e4m3"]}, "fp8", ("not one of auto, fp8_e4m3", None)),
    ({"type": "list", "elements": "int"}, [1, 2, "three"], ("not an integer", 2)),
    ({"type": "dict"}, {"a": 1}, None),
    # What it would convert and a role would misread: refused before it.
    ({"type": "bool"}, "false", ("a string, not a boolean", None)),
    ({"type": "list"}, "a,b", ("not a list", None)),
    ({"type": "dict"}, "a=1", ("not a dict", None)),
    ({"type": "str"}, ["a"], ("a list, not a string", None)),
    ({"type": "path"}, {"a": 1}, ("a dict, not a string", None)),
    ({"type": "str"}, None, None),
])
def test_a_value_is_checked_against_its_option_as_ansible_checks_it(spec, value, expected):
    assert inputs.type_problem(spec, value) == expected


def test_worker_group_with_several_workers_is_refused():
    groups, hostvars = inventory(d0={"sglang_pd_worker_group": "g", "sglang_pd_decode_workers": [{"gpus": "0-3"}, {"gpus": "4-7"}]})
    problems = checks.pd_check_worker_specs(hostvars, groups)
    assert problems == ['d0: sglang_pd_worker_group = "g": a host of a multi-node worker runs only that worker, but '
                        'sglang_pd_decode_workers lists 2; remove sglang_pd_worker_group, or give the host a single entry '
                        'in sglang_pd_decode_workers']


def test_a_router_without_key_is_refused_unless_allowed():
    groups, hostvars = inventory(d0={"sglang_router_api_key": ""})
    problems = router_rules.pd_check_router(model_of(groups, hostvars))
    assert len(problems) == 1 and problems[0].startswith('d0: sglang_router_api_key = "": empty')
    hostvars["d0"]["sglang_router_allow_unauthenticated"] = True
    assert router_rules.pd_check_router(model_of(groups, hostvars)) == []
    hostvars["d0"]["sglang_router_allow_unauthenticated"] = "true"
    assert router_rules.pd_check_router(model_of(groups, hostvars)) != []


def test_the_workers_follow_the_router_key_and_another_key_is_refused_unshown():
    groups, hostvars = inventory()
    model = model_of(groups, hostvars)
    assert {w["launch"]["secret"]["args"][1] for w in model["workers"]} == {"k-unit"}
    groups, hostvars = inventory(p0={"sglang_worker_api_key": "other-key-1"})
    problems = router_rules.pd_check_router(model_of(groups, hostvars))
    assert len(problems) == 1 and problems[0].startswith("p0: sglang_worker_api_key = <redacted>: not the key of the router on d0")
    assert "other-key-1" not in problems[0] and "k-unit" not in problems[0]
    groups, hostvars = inventory(p0={"sglang_router_api_key": ""})
    assert any(p.startswith("p0: sglang_worker_api_key") for p in router_rules.pd_check_router(model_of(groups, hostvars)))


@pytest.mark.parametrize("variable, value", [
    ("sglang_worker_extra_args", ["--api-key", "argv-key-2"]),
    ("sglang_worker_extra_args", ["--admin-api-key=argv-key-2"]),
    ("sglang_worker_options", {"api_key": "argv-key-2"}),
])
def test_a_worker_key_on_the_command_line_is_refused_unshown(variable, value):
    groups, hostvars = inventory(p0={variable: value})
    model = model_of(groups, hostvars)
    assert all("argv-key-2" not in " ".join(w["launch"]["argv"]) for w in model["workers"] if variable != "sglang_worker_extra_args")
    problems = checks.pd_check_flags(model, hostvars)
    assert problems and all(p.startswith("p0: ") for p in problems)
    assert all("argv-key-2" not in p for p in problems)


def test_metrics_on_a_host_name_need_an_address():
    groups, hostvars = inventory(d0={"sglang_pd_service_address": "localhost"})
    problems = router_rules.pd_check_router(model_of(groups, hostvars))
    assert any("the metrics would listen on the service address localhost" in p for p in problems)
    hostvars["d0"]["sglang_router_prometheus_host"] = "10.0.0.2"
    assert router_rules.pd_check_router(model_of(groups, hostvars)) == []


SHA = "3f" * 32
MANIFEST = f"# glm-5.2-fp8\n\n{SHA}  1234  config.json\n{SHA}  5368709120  model-00001-of-00002.safetensors\n"


def manifest_at(tmp_path, text=MANIFEST):
    path = tmp_path / "glm.manifest"
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_a_whole_manifest_and_staging_pass(tmp_path):
    _groups, hostvars = inventory()
    for one in hostvars.values():
        one.update(sglang_pd_model_manifest=manifest_at(tmp_path), sglang_pd_model_stage=True,
                   sglang_pd_cluster_cidr="10.0.0.0/16")
    assert checks.pd_check_model_weights(hostvars, ["p0", "d0"]) == []


def test_no_manifest_and_no_staging_check_nothing():
    _groups, hostvars = inventory()
    assert checks.pd_check_model_weights(hostvars, ["p0", "d0"]) == []


def test_staging_needs_a_manifest_and_the_cluster_network():
    _groups, hostvars = inventory(p0={"sglang_pd_model_stage": True}, d0={"sglang_pd_model_stage": True})
    problems = checks.pd_check_model_weights(hostvars, ["p0", "d0"])
    assert len(problems) == 2
    assert problems[0].startswith("p0, d0: sglang_pd_model_manifest = null: sglang_pd_model_stage copies the files a "
                                  "manifest lists, and none is set; write sglang_pd_model_manifest")
    assert problems[1].startswith("p0, d0: sglang_pd_cluster_cidr = null: sglang_pd_model_stage copies between nodes "
                                  "through a seed rsync daemon that admits only the cluster network")


def test_staging_given_as_a_string_is_left_to_the_type_check():
    _groups, hostvars = inventory(p0={"sglang_pd_model_stage": "true"})
    assert checks.pd_check_model_weights(hostvars, ["p0"]) == []


def test_a_manifest_missing_on_the_controller_is_named_once_for_every_host(tmp_path):
    missing = str(tmp_path / "nowhere.manifest")
    _groups, hostvars = inventory(p0={"sglang_pd_model_manifest": missing}, d0={"sglang_pd_model_manifest": missing})
    assert checks.pd_check_model_weights(hostvars, ["p0", "d0"]) == [
        f'p0, d0: sglang_pd_model_manifest = "{missing}": no such file on the controller; '
        "make the manifest (docs/model_weights.md) and write its path here"]


def test_a_relative_manifest_path_is_refused():
    _groups, hostvars = inventory(p0={"sglang_pd_model_manifest": "files/glm.manifest"})
    problems = checks.pd_check_model_weights(hostvars, ["p0"])
    assert problems == ['p0: sglang_pd_model_manifest = "files/glm.manifest": not an absolute path on the controller; '
                        "write an absolute path (or ~/...); an inventory can name its own folder with inventory_dir"]


@pytest.mark.parametrize("line, problem", [
    (f"{SHA} config.json", 'manifest line 5: expected "SHA256  SIZE  NAME" (3 fields), found 2 field(s)'),
    (f"{SHA}  12  special tokens.json", "(3 fields), found 4 field(s)"),
    (f"{SHA[:12]}  12  config.json", f"manifest line 5: the sha256 must be 64 hex digits, found '{SHA[:12]}'"),
    (f"{'g' * 64}  12  config.json", "the sha256 must be 64 hex digits"),
    (f"{SHA}  4.2G  config.json", "manifest line 5: the size must be a whole number of bytes, found '4.2G'"),
    (f"{SHA}  -1  config.json", "the size must be a whole number of bytes, found '-1'"),
    (f"{SHA}  12  ../secrets", "the name ../secrets contains .."),
    (f"{SHA}  12  /etc/passwd", "the name /etc/passwd is absolute"),
    (f"{SHA}  12  original/../../etc/passwd", "contains .."),
    (f"{SHA}  12  model-00001-of-00002.safetensors", "manifest line 5: model-00001-of-00002.safetensors is listed twice"),
])
def test_a_malformed_manifest_line_names_the_file_and_the_line(tmp_path, line, problem):
    """The model_weights module's own parser judges the manifest: the preflight refuses what the module would."""
    path = manifest_at(tmp_path, MANIFEST + line + "\n")
    _groups, hostvars = inventory(p0={"sglang_pd_model_manifest": path})
    problems = checks.pd_check_model_weights(hostvars, ["p0"])
    assert len(problems) == 1, problems
    assert problems[0].startswith(f'p0: sglang_pd_model_manifest = "{path}": manifest line 5: ')
    assert problem in problems[0]
    assert problems[0].endswith("see docs/model_weights.md")


def test_folders_upper_case_hashes_and_windows_line_ends_pass(tmp_path):
    path = manifest_at(tmp_path, f"{SHA.upper()}\t7   original/tokenizer.model\r\n  # indented comment\n")
    _groups, hostvars = inventory(p0={"sglang_pd_model_manifest": path})
    assert checks.pd_check_model_weights(hostvars, ["p0"]) == []


def test_an_empty_manifest_is_refused(tmp_path):
    _groups, hostvars = inventory(p0={"sglang_pd_model_manifest": manifest_at(tmp_path, "# nothing yet\n")})
    problems = checks.pd_check_model_weights(hostvars, ["p0"])
    assert len(problems) == 1 and "lists no file, so any model folder would pass" in problems[0]


@pytest.mark.parametrize("overrides, named", [
    ({"sglang_pd_prefill_port": 70000}, "p0: port of sglang-prefill (sglang_pd_prefill_port) = 70000: outside 1-65535"),
    ({"sglang_pd_bootstrap_port": 0}, "p0: bootstrap port of sglang-prefill (sglang_pd_bootstrap_port) = 0: outside 1-65535"),
    ({"sglang_pd_prefill_workers": [{"port": 70000}]}, "p0: sglang_pd_prefill_workers[0].port = 70000: outside 1-65535"),
])
def test_a_port_out_of_range_is_named_by_the_first_check_that_sees_it(overrides, named):
    """A worker entry's own port is refused with the entry; a variable's, on the plan, with the worker it numbers."""
    groups, hostvars = inventory(p0=overrides)
    first = checks.pd_check_worker_specs(hostvars, groups) or checks.pd_check_ports(model_of(groups, hostvars))
    assert len(first) == 1 and first[0].startswith(named), first
