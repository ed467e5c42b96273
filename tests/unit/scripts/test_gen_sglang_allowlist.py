# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""scripts/gen_sglang_allowlist.py reads flags from SGLang's server-args definition with ast."""

from __future__ import annotations

import importlib.util
import os
import textwrap

import pytest

from ansible_collections.mindverse.sglang_pd.plugins.module_utils import _sglang_flags_v0_5_14 as shipped
from ansible_collections.mindverse.sglang_pd.plugins.module_utils import _sglang_router_flags_v0_3_2 as shipped_router
from ansible_collections.mindverse.sglang_pd.plugins.module_utils import _smg_router_flags_v1_13_0 as shipped_smg

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
SPEC = importlib.util.spec_from_file_location("gen_sglang_allowlist", os.path.join(REPO, "scripts", "gen_sglang_allowlist.py"))
gen = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(gen)

SERVER_ARGS = textwrap.dedent('''
    import argparse
    import dataclasses
    from typing import List, Literal, Optional
    from sglang.srt.arg_groups.arg_utils import A, Arg

    KV = ["auto", "fp8_e4m3"]
    BACKENDS = ["mooncake"]
    if something():
        BACKENDS.append("fake")
    DYNAMIC = list(registry())

    @dataclasses.dataclass
    class ServerArgs:
        model_path: A[str, Arg(help="weights", aliases=["--model"])]
        tp_size: A[int, Arg(help="tp", aliases=["--tensor-parallel-size"])] = 1
        trust_remote_code: A[bool, "custom code"] = False
        mode: A[Literal["null", "prefill"], "mode"] = "null"
        kv_cache_dtype: A[str, Arg(help="kv", choices=KV)] = "auto"
        backend: A[str, Arg(help="b", choices=BACKENDS)] = "mooncake"
        parser_name: A[str, Arg(help="p", choices=DYNAMIC)] = "x"
        lora_paths: A[Optional[List[str]], Arg(help="l", nargs="*")] = None
        strict: A[bool, Arg(help="s", action=argparse.BooleanOptionalAction)] = False
        internal: A[bool, Arg(no_cli=True)] = False
        named: A[int, Arg(help="n", cli_name="--other-name")] = 0
        plain: int = 0

        @staticmethod
        def add_cli_args(parser):
            parser.add_argument("--stream-output", action=DeprecatedStoreTrueAction, dest="inc",
                                new_flag="--incremental-streaming-output", help="[Deprecated]")
            parser.add_argument("--old-thing", action=DeprecatedAction, help="gone")
            parser.add_argument("--config", type=str)
            parser.add_argument("--cuda-graph-bs", type=int, nargs="+", action=DeprecatedAliasStoreAction,
                                new_flag="--cuda-graph-bs-decode", dest="bs")
''')


def test_parse_server_args():
    flags = gen.parse_server_args(SERVER_ARGS)
    assert flags["--model-path"] == ("model_path", "value", None, None)
    assert flags["--model"] == ("model_path", "value", None, None)
    assert flags["--tensor-parallel-size"] == ("tp_size", "value", None, None)
    assert flags["--trust-remote-code"] == ("trust_remote_code", "switch", None, None)
    assert flags["--mode"] == ("mode", "value", ("null", "prefill"), None)
    assert flags["--kv-cache-dtype"][2] == ("auto", "fp8_e4m3")
    assert flags["--backend"][2] == ("mooncake", "fake")
    assert flags["--parser-name"][2] is None
    assert flags["--lora-paths"][1] == "list"
    assert flags["--strict"][1] == "switch" and flags["--no-strict"][1] == "switch"
    assert "--internal" not in flags and "--plain" not in flags
    assert "--other-name" in flags and "--named" not in flags
    assert flags["--stream-output"] == ("inc", "switch", None, "--incremental-streaming-output")
    assert flags["--old-thing"][3] == ""
    assert flags["--config"] == ("config", "value", None, None)
    assert flags["--cuda-graph-bs"] == ("bs", "list", None, "--cuda-graph-bs-decode")


def test_render_module_is_importable(tmp_path):
    flags = gen.parse_server_args(SERVER_ARGS)
    target = tmp_path / "_sglang_flags_v9_9_9.py"
    target.write_text(gen.render_module(flags, "9.9.9", "0" * 64))
    spec = importlib.util.spec_from_file_location("flags", str(target))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.VERSION == "9.9.9" and module.FLAGS == dict(sorted(flags.items()))


def test_missing_server_args_class():
    with pytest.raises(SystemExit):
        gen.parse_server_args("x = 1\n")


@pytest.mark.parametrize("flag, kind, choice", [
    ("--tp-size", "value", None), ("--tensor-parallel-size", "value", None), ("--model", "value", None),
    ("--trust-remote-code", "switch", None), ("--enable-dp-attention", "switch", None),
    ("--kv-cache-dtype", "value", "fp8_e4m3"), ("--attention-backend", "value", "aiter"),
    ("--disaggregation-mode", "value", "prefill"), ("--disaggregation-transfer-backend", "value", "mooncake"),
    ("--disaggregation-bootstrap-port", "value", None), ("--disaggregation-ib-device", "value", None),
    ("--base-gpu-id", "value", None), ("--dist-init-addr", "value", None), ("--nnodes", "value", None),
    ("--node-rank", "value", None), ("--page-size", "value", None), ("--chunked-prefill-size", "value", None),
    ("--mem-fraction-static", "value", None), ("--attn-cp-size", "value", None), ("--enable-prefill-cp", "switch", None),
])
def test_shipped_allowlist_has_the_production_flags(flag, kind, choice):
    assert shipped.VERSION == "0.5.14"
    entry = shipped.FLAGS[flag]
    assert entry[1] == kind
    if choice:
        assert choice in entry[2]


def test_shipped_allowlist_refuses_plain_fp8_and_tp():
    assert "fp8" not in shipped.FLAGS["--kv-cache-dtype"][2]
    assert "--tp" not in shipped.FLAGS


ROUTER_ARGS = textwrap.dedent('''
    import dataclasses
    from typing import Optional

    @dataclasses.dataclass
    class RouterArgs:
        policy: str = "cache_aware"
        log_level: Optional[str] = None
        max_tree_size: int = 2**26
        cache_threshold: float = 0.3

        @staticmethod
        def add_cli_args(parser, use_router_prefix=False):
            prefix = "router-" if use_router_prefix else ""
            group = parser.add_argument_group("Routing")
            group.add_argument(f"--{prefix}policy", type=str, choices=["random", "cache_aware"])
            group.add_argument(f"--{prefix}log-level", type=str, choices=["debug", "info"])
            group.add_argument(f"--{prefix}max-tree-size", type=int)
            group.add_argument(f"--{prefix}dp-aware", action="store_true")
''')


def test_router_flags_from_f_strings_with_types_and_defaults():
    flags = gen.parse_arguments(ROUTER_ARGS, "RouterArgs")
    assert flags["--policy"] == ("policy", "value", ("random", "cache_aware"), None)
    assert flags["--dp-aware"] == ("dp_aware", "switch", None, None)
    types, defaults = gen.parse_types(ROUTER_ARGS, "RouterArgs")
    assert types == {"cache_threshold": "float", "log_level": "str", "max_tree_size": "int", "policy": "str"}
    assert defaults == {"cache_threshold": 0.3, "log_level": None, "max_tree_size": 2 ** 26, "policy": "cache_aware"}


def test_choices_spread_from_another_list():
    text = textwrap.dedent('''
        COMMON = ["random", "least_load"]
        PREFILL = [*COMMON, "bucket"]
        OPEN = [*registry(), "bucket"]

        class RouterArgs:
            @staticmethod
            def add_cli_args(parser, use_router_prefix=False):
                prefix = "router-" if use_router_prefix else ""
                parser.add_argument(f"--{prefix}prefill-policy", type=str, choices=PREFILL)
                parser.add_argument(f"--{prefix}parser", type=str, choices=OPEN)
    ''')
    flags = gen.parse_arguments(text, "RouterArgs")
    assert flags["--prefill-policy"][2] == ("random", "least_load", "bucket")
    assert flags["--parser"][2] is None


def test_shipped_smg_table_is_the_successor_of_sglang_router():
    assert shipped_smg.VERSION == "1.13.0" and len(shipped_smg.FLAGS) > len(shipped_router.FLAGS)
    assert "--mini-lb" in shipped_router.FLAGS and "--mini-lb" not in shipped_smg.FLAGS
    for policy in ("least_load", "consistent_hashing", "prefix_hash", "passthrough"):
        assert policy not in shipped_router.FLAGS["--policy"][2]
        for flag in ("--policy", "--prefill-policy", "--decode-policy"):
            assert policy in shipped_smg.FLAGS[flag][2], (flag, policy)
    assert "bucket" in shipped_smg.FLAGS["--prefill-policy"][2]


def test_assertions_carry_their_guards():
    text = textwrap.dedent('''
        class ServerArgs:
            def check_server_args(self):
                assert self.a > 0
                if self.b:
                    if self.c == "x":
                        raise ValueError("no")
                else:
                    assert self.d
    ''')
    assert gen.assertions(text, "ServerArgs", ["check_server_args"]) == [
        ("check_server_args", "", "self.a > 0"),
        ("check_server_args", "(self.b) and (self.c == 'x')", "raise"),
        ("check_server_args", "not (self.b)", "self.d"),
    ]
