# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The shipped flag tables and the preflight's SGLang rules match the pinned releases' own sources.

The set-up downloads the releases of requirements-sources.txt to .cache/sources. These tests
fail when a pin changes and the tables were not regenerated (scripts/gen_sglang_allowlist.py),
when SGLang adds, drops or changes an assertion the rules were reviewed against (each is a
rule or in NOT_CHECKED, with the reason), and when a rule refuses anything other than what
SGLang's own expression refuses.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import itertools
import os
from types import SimpleNamespace

import pytest

from ansible_collections.mindverse.sglang_pd.plugins.plugin_utils.preflight import pairing as pairing_checks, sglang_rules

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
SPEC = importlib.util.spec_from_file_location("gen_sglang_allowlist", os.path.join(REPO, "scripts", "gen_sglang_allowlist.py"))
gen = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(gen)
PINS = gen.pinned_versions()
SGLANG_TABLE = importlib.import_module("ansible_collections.mindverse.sglang_pd.plugins.module_utils."
                                       + gen.PACKAGES["sglang"][2][:-3] % PINS["sglang"].replace(".", "_"))


# Assertions of sglang_rules.REVIEWED_METHODS the preflight leaves to SGLang, and why: "method | guard | assertion".
NOT_CHECKED = {
    "check_server_args |  | self.pp_max_micro_batch_size is None or self.pp_max_micro_batch_size >= 1":
        "pipeline micro-batching is not part of a PD fleet's options; SGLang reports it at start",
    "check_server_args |  | not (self.disable_cuda_graph_padding and self.enable_torch_compile)":
        "torch.compile is not used on ROCm PD workers; SGLang reports it at start",
    "check_server_args | (self.pp_size > 1) | self.disable_overlap_schedule and self.speculative_algorithm is None":
        "the overlap schedule is decided inside SGLang from the model; not known before start",
    "check_server_args | (self.speculative_algorithm is not None) | not self.enable_mixed_chunk":
        "the speculative algorithm can be set by SGLang from the model; not known before start",
    "check_server_args | (self.enable_pdmux) | self.pp_size == 1": "PD multiplexing is refused by its disaggregation rule",
    "check_server_args | (self.enable_pdmux) | self.chunked_prefill_size == -1": "PD multiplexing is refused by its disaggregation rule",
    "check_server_args | (self.enable_pdmux) | self.disable_overlap_schedule": "PD multiplexing is refused by its disaggregation rule",
    "check_server_args | (self.model_impl == 'mindspore') | is_npu()": "depends on the device (Ascend NPU)",
    "check_server_args | (not self.tokenizer_metrics_custom_labels_header and self.tokenizer_metrics_allowed_custom_labels) | raise":
        "metrics labels are not set by the collection; SGLang reports it at start",
    "check_server_args | (self.export_metrics_to_file and self.export_metrics_to_file_dir is None) | raise":
        "metrics files are not set by the collection; SGLang reports it at start",
    "check_server_args | (self.enable_quant_communications and self.tp_size == 1) | raise": "NPU only",
    "check_server_args | (self.enable_quant_communications and self.device != 'npu') | raise": "depends on the device (NPU)",
    "check_server_args | (self.enable_grpc and self.grpc_port is not None and (self.grpc_port == self.port)) | raise":
        "the gRPC port comes from SGLANG_GRPC_PORT in the environment; the ports check covers the HTTP port",
    "check_server_args | (self.gc_threshold) and (not 1 <= len(self.gc_threshold) <= 3) | raise":
        "the flag table refuses gc_threshold without values; more than 3 is left to SGLang",
    "_handle_context_parallelism | (self.enable_prefill_cp and self.cp_strategy is None) | raise":
        "cp_strategy's default is set inside SGLang; not known before start",
    "_handle_context_parallelism | (self.enable_prefill_context_parallel and self.enable_dsa_prefill_context_parallel) | raise":
        "NSA (DeepSeek V3.2) prefill context parallelism is not used by GLM-5.2 fleets; SGLang reports it at start",
}


def rule_key(method, guard, asserts):
    """How REVIEWED_METHODS' assertions are named in NOT_CHECKED."""
    return f"{method} | {guard} | {asserts}"


def source(package, member=None):
    archive = gen.release_archive(package, PINS[package], gen.SOURCES)
    assert archive, f"{package}=={PINS[package]} is not in {gen.SOURCES}: run make setup (scripts/setup/sources.sh)"
    return gen.read_member(archive, member or gen.PACKAGES[package][0])


@pytest.mark.parametrize("package", sorted(gen.PACKAGES))
def test_shipped_flag_table_is_generated_from_the_pinned_release(package):
    with open(gen.output_path(package, PINS[package]), encoding="utf-8") as handle:
        shipped = handle.read()
    assert shipped == gen.generate(package, PINS[package], source(package)), \
        f"regenerate: python scripts/gen_sglang_allowlist.py --package {package}"


def test_rules_were_reviewed_against_the_shipped_table():
    assert sglang_rules.REVIEWED_SOURCE_SHA256 == SGLANG_TABLE.SOURCE_SHA256, \
        "the SGLang flag table comes from another server_args.py: review RULES and NOT_CHECKED against it"


def test_every_assertion_is_a_rule_or_left_to_sglang_with_a_reason():
    found = {rule_key(*entry) for entry in gen.assertions(source("sglang"), "ServerArgs", sglang_rules.REVIEWED_METHODS)}
    rules = {rule_key(r.method, r.guard, r.asserts) for r in sglang_rules.RULES}
    assert len(rules) == len(sglang_rules.RULES)
    assert not rules & set(NOT_CHECKED)
    assert found - rules - set(NOT_CHECKED) == set(), "new assertions in the pinned SGLang: add a rule or a reason"
    assert (rules | set(NOT_CHECKED)) - found == set(), "assertions gone from the pinned SGLang"


def test_object_store_schemes_are_sglangs():
    tree = ast.parse(source("sglang", "sglang/srt/utils/runai_utils.py"))
    schemes = next(ast.literal_eval(n.value) for n in tree.body if isinstance(n, ast.Assign)
                   and getattr(n.targets[0], "id", "") == "SUPPORTED_SCHEMES")
    assert sglang_rules.OBJECT_STORE_SCHEMES == tuple(schemes)


def _pool(option):
    entry = next((e for e in SGLANG_TABLE.FLAGS.values() if e[0] == option), None)
    if entry and entry[1] == "switch":
        return (False, True)
    if entry and entry[2]:
        return entry[2]
    kind = SGLANG_TABLE.TYPES.get(option)
    if kind == "int":
        return (-1, 0, 1, 2, 3, 4, 8)
    if kind == "float":
        return (-0.5, 0.0, 1.0)
    return ("glm", "glm:5.2", "s3://models/glm:5.2")


def _verdict(check):
    try:
        return bool(check())
    except ZeroDivisionError:
        return True  # SGLang fails on it too


@pytest.mark.parametrize("rule", sglang_rules.RULES, ids=lambda r: r.asserts)
def test_rule_refuses_exactly_what_sglang_asserts(rule):
    options = rule.options()
    env = {"is_runai_obj_uri": lambda uri: str(uri).lower().startswith(sglang_rules.OBJECT_STORE_SCHEMES)}
    checked = 0
    for values in itertools.product(*(_pool(o) for o in options)):
        args = SimpleNamespace(**dict(zip(options, values)))
        scope = dict(env, self=args)
        sglang = _verdict(lambda: eval(rule.guard or "True", scope)  # pylint: disable=eval-used,cell-var-from-loop
                          and (rule.asserts == "raise" or not eval(rule.asserts, scope)))  # pylint: disable=eval-used,cell-var-from-loop
        ours = _verdict(lambda: rule.refused(args))  # pylint: disable=cell-var-from-loop
        assert ours == sglang, f"{rule.asserts} with {vars(args)}: SGLang {'refuses' if sglang else 'takes'} it"
        checked += 1
    assert checked >= 2


@pytest.mark.parametrize("key", sorted(pairing_checks.SOURCES))
def test_pairing_rules_quote_the_pinned_release(key):
    member, words = pairing_checks.SOURCES[key]
    assert words in source("sglang", member)
