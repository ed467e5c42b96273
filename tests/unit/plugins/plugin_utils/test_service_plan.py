# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of the services' plans: command lines, environment, secrets, containers (plugins/plugin_utils/service_plan.py)."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.mindverse.sglang_pd.plugins.filter import pd
from ansible_collections.mindverse.sglang_pd.plugins.filter import service_plan as service_plan_filters
from ansible_collections.mindverse.sglang_pd.plugins.plugin_utils import service_plan as sp

WORKER_DEFAULTS = {
    "sglang_worker_python": "python",
    "sglang_worker_host": "0.0.0.0",
    "sglang_worker_model_path": "/models/m",
    "sglang_worker_served_model_name": "m",
    "sglang_worker_tp_size": 8,
    "sglang_worker_dp_size": 1,
    "sglang_worker_ep_size": 1,
    "sglang_worker_pp_size": 1,
    "sglang_worker_enable_dp_attention": False,
    "sglang_worker_page_size": None,
    "sglang_worker_chunked_prefill_size": None,
    "sglang_worker_mem_fraction_static": None,
    "sglang_worker_kv_cache_dtype": "fp8_e4m3",
    "sglang_worker_attention_backend": "aiter",
    "sglang_worker_trust_remote_code": True,
    "sglang_worker_transfer_backend": "mooncake",
    "sglang_worker_ib_device": None,
    "sglang_worker_gpu_isolation": "visible_devices",
    "sglang_worker_cp_options": {},
    "sglang_worker_options": {},
    "sglang_worker_prefill_options": {},
    "sglang_worker_decode_options": {},
    "sglang_worker_extra_args": [],
    "sglang_worker_rocm_env": {"SGLANG_USE_AITER": "1"},
    "sglang_worker_nccl_env": {"NCCL_MIN_NCHANNELS": "112"},
    "sglang_worker_mooncake_env": {"MC_DISABLE_HIP": "1"},
    "sglang_worker_pd_env": {},
    "sglang_worker_extra_env": {},
}


def rv(**overrides):
    values = dict(WORKER_DEFAULTS)
    values.update({"sglang_worker_" + k: v for k, v in overrides.items()})
    return values


def workers(hostvars, mode, ranks="serving"):
    return pd.pd_workers(list(hostvars), hostvars, mode, ranks)


def _prefill(**extra):
    worker = workers({"p0": {"sglang_pd_service_address": "10.0.0.1"}}, "prefill")[0]
    worker.update(extra)
    return worker


ROUTER_VARS = {
    "sglang_router_python": "python", "sglang_router_policy": "cache_aware", "sglang_router_host": "0.0.0.0",
    "sglang_router_port": "30000", "sglang_router_prometheus_port": 29000, "sglang_router_prometheus_host": None,
    "sglang_router_decode_policy": "round_robin", "sglang_router_disable_retries": False,
    "sglang_router_request_timeout_secs": 600, "sglang_router_options": {}, "sglang_router_extra_args": [],
    "sglang_router_env": {"RUST_LOG": "info"}, "sglang_router_api_key": "", "sglang_router_control_plane_api_keys": [],
}


def _router_workers():
    hostvars = {"p0": {"sglang_pd_service_address": "10.0.0.1", "sglang_pd_prefill_workers": [{}, {}]},
                "d0": {"sglang_pd_service_address": "10.0.0.2"}}
    return pd.pd_workers(["p0"], hostvars, "prefill"), pd.pd_workers(["d0"], hostvars, "decode")


HELP_0_3_2 = """usage: launch_router.py [-h] [--host HOST] [--port PORT]
                        [--policy {random,round_robin,cache_aware,power_of_two,manual}]
                        [--prefill-policy {random,round_robin,cache_aware,power_of_two,manual,bucket}]
                        [--pd-disaggregation] [--prefill PREFILL [PREFILL ...]] [--decode URL]
                        [--prometheus-port PROMETHEUS_PORT] [--api-key API_KEY]
  --policy {random,round_robin,cache_aware,power_of_two,manual}
                        Load balancing policy (default: cache_aware)
  --control-plane-api-keys [CONTROL_PLANE_API_KEYS ...]
    --prefill http://prefill1:8000 9000 --prefill http://prefill2:8000 none
"""


HELP_SMG_WRAPPED = """sglang-pd-router-generation: smg
usage: launch_router.py [-h] [--host HOST] [--port PORT] [--pd-disaggregation]
  --remove-unhealthy-workers, --no-remove-unhealthy-workers
                        Take unhealthy workers out; use the --no-
                        form to keep them. See also --worker-
                        startup-timeout-secs.
  --worker-startup-timeout-secs WORKER_STARTUP_TIMEOUT_SECS
  --policy {random,round_robin,cache_aware,power_of_two,least_load,consistent_hashing}
"""


def _fake_router_packages(root):
    """Two importable router packages whose launch_router prints the arguments it was given."""
    for package in ("sglang_router", "smg"):
        (root / package).mkdir()
        (root / package / "__init__.py").write_text("")
        (root / package / "launch_router.py").write_text(
            f"import sys\nprint('{package}', ' '.join(sys.argv[1:]))\n")


def _option(argv, flag):
    return argv[argv.index(flag) + 1]


# --------------------------------------------------------------------------- options

def test_cli_options():
    argv = sp.cli_options({"trust_remote_code": True, "skip": False, "none": None, "empty": "",
                           "tp_size": 8, "json_cfg": {"b": 1, "a": 2}, "lora_paths": ["a", "b"]})
    assert argv == ["--trust-remote-code", "--tp-size", "8", "--json-cfg", '{"a":2,"b":1}', "--lora-paths", "a", "b"]


@pytest.mark.parametrize("value, expected", [
    (None, None), ([], None), ({}, None),
    (["mlx5_0", "mlx5_1"], "mlx5_0,mlx5_1"),
    ("mlx5_0", "mlx5_0"),
    ("/etc/ib.json", "/etc/ib.json"),
    ({0: ["mlx5_0", "mlx5_1"], "1": "mlx5_2"}, '{"0":"mlx5_0,mlx5_1","1":"mlx5_2"}'),
    ({10: "mlx5_10", 2: "mlx5_2"}, '{"2":"mlx5_2","10":"mlx5_10"}'),
])
def test_ib_device_arg(value, expected):
    assert sp.ib_device_arg(value) == expected


def test_worker_launch_builds_the_production_command():
    launch = sp.worker_launch(_prefill(), rv(ib_device={0: ["mlx5_ib0"], 1: ["mlx5_ib1"]}))
    argv = launch["argv"]
    assert argv[:11] == ["python", "-c", sp.PY_LAUNCHER, "sglang.launch_server", "-", "--disaggregation-mode", "prefill",
                         "--port", "30100", "--disaggregation-bootstrap-port", "8998"]
    assert launch["options_start"] == 5 and launch["secret"] == {}
    assert "--trust-remote-code" in argv
    assert argv[argv.index("--kv-cache-dtype") + 1] == "fp8_e4m3"
    assert argv[argv.index("--disaggregation-ib-device") + 1] == '{"0":"mlx5_ib0","1":"mlx5_ib1"}'
    assert "--page-size" not in argv and "--enable-dp-attention" not in argv
    assert len(launch["origins"]) == len(argv)
    assert launch["origins"][argv.index("--tp-size")] == "sglang_worker_tp_size"


def test_worker_options_merge_in_order():
    worker = _prefill(args={"tp_size": 2, "mem_fraction_static": 0.8})
    role_vars = rv(options={"tp_size": 4, "page_size": 32}, prefill_options={"page_size": 64},
                   cp_options={"attn_cp_size": 8, "enable_prefill_cp": True},
                   extra_args=["--log-level", "info"], prefill_extra_args=["--enable-metrics"])
    launch = sp.worker_launch(worker, role_vars)
    argv, origins = launch["argv"], launch["origins"]
    assert argv.count("--tp-size") == 1 and argv[argv.index("--tp-size") + 1] == "2"
    assert origins[argv.index("--tp-size")] == "args in sglang_pd_prefill_workers"
    assert argv[argv.index("--page-size") + 1] == "64"
    assert origins[argv.index("--page-size")] == "sglang_worker_prefill_options"
    assert "--enable-prefill-cp" in argv and argv[argv.index("--attn-cp-size") + 1] == "8"
    assert argv[-3:] == ["--log-level", "info", "--enable-metrics"]
    assert origins[-1] == "sglang_worker_prefill_extra_args"


def test_fixed_options_come_from_inventory_only():
    launch = sp.worker_launch(_prefill(), rv(options={"port": 1, "disaggregation_bootstrap_port": 2, "node_rank": 3}))
    argv = launch["argv"]
    assert argv.count("--port") == 1 and argv[argv.index("--port") + 1] == "30100"
    assert argv.count("--disaggregation-bootstrap-port") == 1 and "--node-rank" not in argv
    assert launch["options"]["port"] == 1  # kept for the preflight, which refuses it


def test_gpu_isolation_visible_devices_and_base_gpu_id():
    worker = _prefill(gpus=[4, 5, 6, 7])
    visible = sp.worker_launch(worker, rv())
    assert visible["env"]["HIP_VISIBLE_DEVICES"] == "4,5,6,7" and "--base-gpu-id" not in visible["argv"]
    base = sp.worker_launch(worker, rv(gpu_isolation="base_gpu_id"))
    assert "HIP_VISIBLE_DEVICES" not in base["env"]
    assert base["argv"][base["argv"].index("--base-gpu-id") + 1] == "4"


def test_multi_node_flags():
    hostvars = {"d0": {"sglang_pd_service_address": "10.0.0.1", "sglang_pd_worker_group": "g", "sglang_pd_dist_init_port": 5000},
                "d1": {"sglang_pd_service_address": "10.0.0.2", "sglang_pd_worker_group": "g"}}
    second = workers(hostvars, "decode", "all")[1]
    argv = sp.worker_launch(second, rv(tp_size=16))["argv"]
    assert argv[argv.index("--dist-init-addr") + 1] == "10.0.0.1:5000"
    assert argv[argv.index("--nnodes") + 1] == "2" and argv[argv.index("--node-rank") + 1] == "1"


def test_worker_env_layers():
    worker = _prefill(env={"NCCL_DEBUG": "INFO", "MC_DISABLE_HIP": None})
    env = sp.worker_env(worker, rv(extra_env={"SGLANG_USE_AITER": False, "X": 1}))
    assert env == {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                   "SGLANG_USE_AITER": "0", "NCCL_MIN_NCHANNELS": "112", "NCCL_DEBUG": "INFO", "X": "1"}


def test_worker_env_is_hub_offline_unless_the_inventory_says_otherwise():
    worker = _prefill()
    assert sp.worker_env(worker, rv(hub_offline=False)).get("HF_HUB_OFFLINE") is None
    assert "TRANSFORMERS_OFFLINE" not in sp.worker_env(worker, rv(extra_env={"TRANSFORMERS_OFFLINE": None}))
    assert sp.worker_env(worker, rv(extra_env={"HF_HUB_OFFLINE": "0"}))["HF_HUB_OFFLINE"] == "0"


def test_router_launch_lists_every_worker_with_its_bootstrap_port():
    prefills, decodes = _router_workers()
    launch = sp.router_launch(prefills, decodes, dict(ROUTER_VARS), "10.0.0.2")
    argv = launch["argv"]
    # The workers reach the router through their env file, which the launcher appends.
    assert argv[:5] == ["python", "-c", sp.PY_LAUNCHER, "sglang_router.launch_router", "-"]
    assert argv[5:7] == ["--pd-disaggregation", "--policy"]
    assert launch["workers"] == ["--prefill", "http://10.0.0.1:30100", "8998", "--prefill", "http://10.0.0.1:30101", "8999",
                                 "--decode", "http://10.0.0.2:30200"]
    assert launch["workers_env"] == {"SGLANG_PD_ROUTER_WORKERS": " ".join(launch["workers"])}
    assert argv[argv.index("--prometheus-host") + 1] == "10.0.0.2"
    assert argv[argv.index("--port") + 1] == "30000"
    assert launch["env"] == {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "RUST_LOG": "info"}
    assert launch["secret"] == {}


def test_router_env_is_hub_offline_unless_the_inventory_says_otherwise():
    assert sp.router_env(dict(ROUTER_VARS, sglang_router_hub_offline=False)) == {"RUST_LOG": "info"}
    assert sp.router_env(dict(ROUTER_VARS, sglang_router_env={"HF_HUB_OFFLINE": None})) == {"TRANSFORMERS_OFFLINE": "1"}


def test_router_loads_its_tokenizer_from_the_given_path():
    prefills, decodes = _router_workers()
    launch = sp.router_launch(prefills, decodes, dict(ROUTER_VARS, sglang_router_tokenizer_path="/models/m"), "10.0.0.2")
    assert launch["argv"][launch["argv"].index("--tokenizer-path") + 1] == "/models/m"
    supported = {"flags": ["--pd-disaggregation", "--prefill", "--decode", "--port", "--policy", "--host"]}
    launch = sp.router_launch(prefills, decodes, dict(ROUTER_VARS, sglang_router_tokenizer_path="/models/m"), "10.0.0.2", supported)
    assert "--tokenizer-path" not in launch["argv"] and "--tokenizer-path" in launch["dropped"]


def test_router_launch_leaves_out_what_the_router_lacks():
    prefills, decodes = _router_workers()
    supported = {"flags": ["--pd-disaggregation", "--prefill", "--decode", "--policy", "--host", "--port"]}
    launch = sp.router_launch(prefills, decodes, dict(ROUTER_VARS), "10.0.0.2", supported)
    assert sorted(launch["dropped"]) == ["--decode-policy", "--prometheus-host", "--prometheus-port", "--request-timeout-secs"]
    assert "--decode-policy" not in launch["argv"]


def test_router_api_keys_never_appear_as_arguments():
    prefills, decodes = _router_workers()
    values = dict(ROUTER_VARS, sglang_router_api_key="s3cret",
                  sglang_router_control_plane_api_keys=[{"id": "ops", "name": "Ops Team", "role": "admin", "key": "k1"}])
    launch = sp.router_launch(prefills, decodes, values, "10.0.0.2", {"flags": ["--api-key", "--pd-disaggregation"]})
    argv = launch["argv"]
    assert argv[:5] == ["python", "-c", sp.PY_LAUNCHER, "sglang_router.launch_router", sp.SECRET_MOUNT]
    assert "s3cret" not in " ".join(argv) and "k1" not in " ".join(argv)
    assert "s3cret" not in str(launch["env"]) and "s3cret" not in str(launch["secret_redacted"])
    assert launch["secret"] == {"args": ["--api-key", "s3cret", "--control-plane-api-keys", "ops:Ops Team:admin:k1"]}
    assert launch["secret_redacted"] == {"args": ["--api-key", "<redacted>", "--control-plane-api-keys", "<redacted>"]}
    assert launch["missing_secret_flags"] == ["--control-plane-api-keys"]


def test_worker_keys_and_secret_env_go_to_the_secret_file_only():
    worker = _prefill(env={"HF_TOKEN": "hf-77", "MY_CERT": "pem-5", "PLAIN": "1"})
    launch = sp.worker_launch(worker, rv(api_key="wk-1", admin_api_key="adm-2", secret_env=["MY_CERT"]))
    argv = " ".join(launch["argv"])
    assert argv.startswith("python -c ") and launch["argv"][3:5] == ["sglang.launch_server", sp.SECRET_MOUNT]
    for secret in ("wk-1", "adm-2", "hf-77", "pem-5"):
        assert secret not in argv and secret not in str(launch["env"]) and secret not in str(launch["secret_redacted"])
    assert launch["secret"] == {"args": ["--api-key", "wk-1", "--admin-api-key", "adm-2"],
                                "env": {"HF_TOKEN": "hf-77", "MY_CERT": "pem-5"}}
    assert launch["secret_redacted"] == {"args": ["--api-key", "<redacted>", "--admin-api-key", "<redacted>"],
                                         "env": {"HF_TOKEN": "<redacted>", "MY_CERT": "<redacted>"}}
    assert launch["env"]["PLAIN"] == "1"


def test_api_keys_given_as_worker_options_stay_off_the_command_line():
    launch = sp.worker_launch(_prefill(args={"api_key": "opt-3"}), rv(options={"admin_api_key": "opt-4"}))
    assert "opt-3" not in " ".join(launch["argv"]) and "opt-4" not in " ".join(launch["argv"])


def test_secret_volume_mounts_the_file_read_only_when_there_are_secrets():
    assert sp.secret_volume("/etc/sglang-pd/w.secret.json", {"args": ["--api-key", "k"]}) == [
        "/etc/sglang-pd/w.secret.json:" + sp.SECRET_MOUNT + ":ro"]
    assert sp.secret_volume("/etc/sglang-pd/w.secret.json", {}) == []


def test_the_launcher_sets_secret_env_in_process(tmp_path):
    import json
    import subprocess
    import sys
    module = tmp_path / "show_env.py"
    module.write_text("import json, os\nprint(json.dumps(os.environ.get('HF_TOKEN')))\n")
    secret = tmp_path / "secret.json"
    secret.write_text(json.dumps({"env": {"HF_TOKEN": "hf-42"}}))
    out = subprocess.run([sys.executable, "-c", sp.PY_LAUNCHER, "show_env", str(secret)],
                         env={"PYTHONPATH": str(tmp_path)}, capture_output=True, text=True, check=True).stdout
    assert json.loads(out) == "hf-42"


def test_the_launcher_appends_workers_and_secrets_in_process(tmp_path):
    """python -c PY_LAUNCHER runs the module with the extra arguments in sys.argv only."""
    import json
    import subprocess
    import sys
    module = tmp_path / "show_args.py"
    module.write_text("import json, sys\nprint(json.dumps(sys.argv[1:]))\n")
    secret = tmp_path / "secret.json"
    secret.write_text(json.dumps({"args": ["--api-key", "k-9"]}))
    env = {"PYTHONPATH": str(tmp_path), "SGLANG_PD_ROUTER_WORKERS": "--prefill http://a:1 8998 --decode http://b:2"}
    out = subprocess.run([sys.executable, "-c", sp.PY_LAUNCHER, "show_args", str(secret), "--port", "30000"],
                         env=env, capture_output=True, text=True, check=True).stdout
    assert json.loads(out) == ["--port", "30000", "--prefill", "http://a:1", "8998", "--decode", "http://b:2",
                               "--api-key", "k-9"]
    out = subprocess.run([sys.executable, "-c", sp.PY_LAUNCHER, "show_args", "-", "--port", "1"],
                         env={"PYTHONPATH": str(tmp_path)}, capture_output=True, text=True, check=True).stdout
    assert json.loads(out) == ["--port", "1"]


def test_router_help_flags():
    found = sp.router_help_flags(HELP_0_3_2)
    assert found["flags"] == sorted(["--host", "--port", "--policy", "--prefill-policy", "--pd-disaggregation", "--prefill",
                                     "--decode", "--prometheus-port", "--api-key", "--control-plane-api-keys"])
    assert found["choices"]["--prefill-policy"][-1] == "bucket"
    assert found["generation"] is None
    assert sp.router_help_flags("") == {"flags": [], "choices": {}, "generation": None}


def test_router_help_flags_skip_words_cut_where_the_help_wraps():
    found = sp.router_help_flags(HELP_SMG_WRAPPED)
    assert found["flags"] == sorted(["--host", "--port", "--pd-disaggregation", "--remove-unhealthy-workers",
                                     "--no-remove-unhealthy-workers", "--worker-startup-timeout-secs", "--policy"])
    assert "least_load" in found["choices"]["--policy"]
    assert found["generation"] == "smg"


def test_router_help_flags_ignore_an_unknown_generation():
    assert sp.router_help_flags("sglang-pd-router-generation: other\n  --port PORT")["generation"] is None


@pytest.mark.parametrize("setting, probed, expected", [
    ("auto", None, "sglang-router"),
    ("auto", {"flags": ["--port"], "generation": "smg"}, "smg"),
    ("auto", {"flags": ["--port"]}, "sglang-router"),
    ("smg", None, "smg"),
    ("sglang-router", {"flags": ["--port"], "generation": "smg"}, "sglang-router"),
])
def test_router_generation_is_the_setting_else_what_the_image_holds(setting, probed, expected):
    assert sp.router_generation({"sglang_router_generation": setting}, probed) == expected


def test_the_files_compared_with_the_ca_image_follow_the_router_package():
    site = "/opt/venv/lib/python3.10/site-packages"
    assert sp.router_package_files(site + "/sglang_router") == [
        "router.py", "launch_router.py", "mini_lb.py", "router_args.py", "sglang_router_rs.abi3.so"]
    assert sp.router_package_files(site + "/smg/") == ["router.py", "launch_router.py", "router_args.py", "smg_rs.abi3.so"]
    with pytest.raises(AnsibleFilterError, match="not a router package this collection knows .*set unified_image_compare_with_ca"):
        sp.router_package_files(site + "/router")


def test_smg_router_is_started_as_smg_launch_router():
    prefills, decodes = _router_workers()
    launch = sp.router_launch(prefills, decodes, dict(ROUTER_VARS, sglang_router_generation="smg"), "10.0.0.2")
    assert launch["argv"][3] == "smg.launch_router"
    assert launch["generation"] == "smg"
    probed = {"flags": ["--pd-disaggregation", "--policy", "--port", "--host"], "generation": "smg"}
    launch = sp.router_launch(prefills, decodes, dict(ROUTER_VARS), "10.0.0.2", probed)
    assert launch["argv"][3] == "smg.launch_router"


@pytest.mark.parametrize("setting, present, expected", [
    ("auto", ("sglang_router", "smg"), "smg"),
    ("auto", ("sglang_router",), "sglang-router"),
    ("sglang-router", ("sglang_router", "smg"), "sglang-router"),
])
def test_router_probe_prints_the_generation_then_its_help(tmp_path, setting, present, expected):
    _fake_router_packages(tmp_path)
    for package in ("sglang_router", "smg"):
        if package not in present:
            for item in (tmp_path / package).iterdir():
                item.unlink()
            (tmp_path / package).rmdir()
    # -S: only the fake packages, not the test environment's own (it has smg installed).
    done = subprocess.run([sys.executable, "-S", "-c", sp.router_probe_script(setting)], capture_output=True, text=True,
                          check=True, env={"PYTHONPATH": str(tmp_path)})
    assert sp.router_help_flags(done.stdout)["generation"] == expected
    assert done.stdout.splitlines()[1] == expected.replace("-", "_") + " --help"


# --------------------------------------------------------------------------- docker and shell

def test_docker_run_argv():
    container = {"name": "w", "network": "host", "ipc": "host", "shm_size": "64g", "privileged": True,
                 "env_file": "/etc/a.env", "env_files": ["/etc/b.env"], "devices": ["/dev/kfd"], "groups": ["44"],
                 "ulimits": ["memlock=-1:-1"], "volumes": ["/m:/m:ro"], "extra_args": ["--pids-limit", "-1"]}
    argv = sp.docker_run_argv(container, "img@sha256:x", ["python", "-m", "x"])
    assert argv == ["/usr/bin/docker", "run", "--rm", "--name", "w", "--network", "host", "--ipc", "host",
                    "--shm-size", "64g", "--privileged", "--env-file", "/etc/a.env", "--env-file", "/etc/b.env",
                    "--device", "/dev/kfd", "--group-add", "44", "--ulimit", "memlock=-1:-1", "--volume", "/m:/m:ro",
                    "--pids-limit", "-1", "img@sha256:x", "python", "-m", "x"]
    assert sp.docker_run_options(container) == argv[2:argv.index("img@sha256:x")]


@pytest.mark.parametrize("detach, first", [
    (True, ["--detach", "--name"]),
    (False, ["--rm", "--name"]),
    (None, ["--rm", "--name"]),
])
def test_docker_run_options_detach_first_and_never_auto_remove(detach, first):
    container = {"name": "w", "network": "host"}
    if detach is not None:
        container["detach"] = detach
    options = sp.docker_run_options(container)
    assert options[:2] == first
    # Docker 20.10 removes an auto-remove container on a daemon restart, live-restore or not.
    assert ("--rm" in options) is not bool(detach)
    assert options.count("--detach") == (1 if detach else 0)
    assert options[-4:] == ["--name", "w", "--network", "host"]


@pytest.mark.parametrize("argv", [
    ["docker", "run", "--x", "a b", "--json", '{"0":"mlx5_0"}', "--q", "it's"],
    ["sh", "-c", 'exec "$@" --api-key "$K"', "r", "python", "-m", "m"],
])
def test_shell_join_round_trips(argv):
    assert shlex.split(sp.shell_join(argv).replace("\\\n", "")) == argv


def test_env_file():
    assert sp.env_file({"B": True, "A": "x"}) == "A=x\nB=1\n"
    assert sp.env_file({}) == ""
    with pytest.raises(AnsibleFilterError):
        sp.env_file({"A": "x\ny"})


def test_redact():
    assert sp.redact({"A": "1", "B": "2"}, ["B"]) == {"A": "1", "B": "<redacted>"}
    assert sp.redact({"A": "1"}) == {"A": "<redacted>"}


def test_filters_are_registered():
    assert callable(pd.FilterModule().filters()["pd_workers"])
    names = service_plan_filters.FilterModule().filters()
    for name in ("sglang_worker_plan", "sglang_router_plan", "sglang_router_help_flags", "env_file", "pd_render_files"):
        assert callable(names[name])
    assert json.loads(sp.ib_device_arg({"1": "b", "0": "a"})) == {"0": "a", "1": "b"}


def test_services_listen_on_the_service_address_unless_told_otherwise():
    hostvars = {"p0": {"sglang_pd_service_address": "10.0.0.1"},
                "p1": {"sglang_pd_service_address": "10.0.0.2", "sglang_pd_listen_all": True}}
    secure, open_ = pd.pd_workers(["p0", "p1"], hostvars, "prefill")
    no_host = {k: v for k, v in WORKER_DEFAULTS.items() if k != "sglang_worker_host"}
    assert _option(sp.worker_launch(secure, no_host)["argv"], "--host") == "10.0.0.1"
    assert _option(sp.worker_launch(open_, no_host)["argv"], "--host") == "0.0.0.0"
    assert _option(sp.worker_launch(secure, dict(no_host, sglang_worker_host="127.0.0.1"))["argv"], "--host") == "127.0.0.1"
    router_vars = dict(ROUTER_VARS, sglang_router_host=None)
    assert _option(sp.router_launch([secure], [], router_vars, "10.0.0.9")["argv"], "--host") == "10.0.0.9"
    assert _option(sp.router_launch([secure], [], router_vars, "10.0.0.9", listen_all=True)["argv"], "--host") == "0.0.0.0"


def test_redact_values_hides_every_secret_of_a_service():
    secret = {"args": ["--api-key", "k-1", "--admin-api-key", "k-12"], "env": {"HF_TOKEN": "hf-9"}}
    line = "api_key='k-1' admin_api_key='k-12' token=hf-9 port=30000"
    assert sp.redact_values(line, secret) == "api_key='<redacted>' admin_api_key='<redacted>' token=<redacted> port=30000"
    assert sp.redact_values("nothing secret", {}) == "nothing secret"


# --------------------------------------------------------------------------- containers, scripts, plans

CONTAINER_WORKER = {"host": "n0", "name": "sglang-prefill", "mode": "prefill", "port": 30100, "bootstrap_port": 8998,
                    "nnodes": 1, "node_rank": 0, "serves_http": True, "url": "http://10.0.0.10:30100"}
CONTAINER_VARS = {"sglang_worker_shm_size": "64g", "sglang_worker_privileged": False,
                  "sglang_worker_devices": ["/dev/kfd", "/dev/dri"], "sglang_worker_groups": ["video"],
                  "sglang_worker_capabilities": ["SYS_PTRACE"], "sglang_worker_security_opts": [],
                  "sglang_worker_ulimits": ["memlock=-1:-1"], "sglang_worker_volumes": ["/m:/models:ro"],
                  "sglang_worker_docker_extra_args": ["--pids-limit", "4096"]}


def test_a_services_container_reads_its_files_from_sglang_service_config_dir():
    role_vars = {**CONTAINER_VARS, "sglang_service_config_dir": "/srv/pd/etc"}
    worker = sp.worker_container(CONTAINER_WORKER, role_vars, {"secret": {"args": ["--api-key", "k"]}})
    assert worker["env_file"] == "/srv/pd/etc/sglang-prefill.env"
    assert worker["volumes"][-1] == "/srv/pd/etc/sglang-prefill.secret.json:/run/sglang-pd/secret.json:ro"
    router = sp.router_container({"sglang_service_config_dir": "/srv/pd/etc"}, {"secret": {}, "options": {"port": 30000}})
    assert (router["env_file"], router["env_files"]) == ("/srv/pd/etc/sglang-router.env", ["/srv/pd/etc/sglang-router.workers.env"])


def test_worker_container_mounts_the_secret_only_when_there_is_one():
    with_secret = sp.worker_container(CONTAINER_WORKER, CONTAINER_VARS, {"secret": {"args": ["--api-key", "k"]}})
    assert with_secret["volumes"] == ["/m:/models:ro", "/etc/sglang-pd/sglang-prefill.secret.json:/run/sglang-pd/secret.json:ro"]
    without = sp.worker_container(CONTAINER_WORKER, CONTAINER_VARS, {"secret": {}})
    assert without["volumes"] == ["/m:/models:ro"]
    options = sp.docker_run_options(with_secret)
    assert options[:3] == ["--detach", "--name", "sglang-prefill"]
    assert "--label" in options and "org.mindverse.sglang_pd.bootstrap_port=8998" in options
    assert options[-2:] == ["--pids-limit", "4096"]


def test_worker_container_takes_what_the_host_resolved():
    container = sp.worker_container(CONTAINER_WORKER, CONTAINER_VARS, {"secret": {}}, devices=["/dev/kfd"], groups=["44"])
    assert container["devices"] == ["/dev/kfd"] and container["groups"] == ["44"]


def test_router_container_reads_its_workers_from_a_second_env_file():
    container = sp.router_container({"sglang_router_name": "sglang-router", "sglang_router_ulimits": [],
                                     "sglang_router_volumes": []}, {"secret": {}, "options": {"port": 30000}})
    assert container["env_files"] == ["/etc/sglang-pd/sglang-router.workers.env"]
    assert "org.mindverse.sglang_pd.port=30000" in container["labels"]


def test_descriptions_name_the_rank_of_a_multi_node_worker():
    assert sp.worker_description(CONTAINER_WORKER) == "SGLang prefill worker on port 30100"
    assert sp.worker_description(dict(CONTAINER_WORKER, nnodes=2, node_rank=1)) == "SGLang prefill worker on port 30100 (node 1 of 2)"
    assert sp.router_description({"options": {"port": 30000}}) == "SGLang PD router on port 30000"


def test_launch_script_execs_exactly_the_argv():
    argv = ["/usr/bin/docker", "run", "--name", "a b", "img@sha256:" + "0" * 64, "python", "-c", "print('x')"]
    script = sp.launch_script(argv, "SGLang PD router on port 30000", "Ansible managed")
    lines = script.splitlines()
    assert lines[:3] == ["#!/bin/sh", "# Ansible managed", "# SGLang PD router on port 30000"]
    body = " ".join(line.rstrip("\\") for line in lines if not line.startswith("#"))
    assert shlex.split(body) == ["exec"] + argv
    assert script.endswith("\n") and not script.endswith("\n\n")


def test_render_files_refuses_what_is_not_a_plan():
    with pytest.raises(AnsibleFilterError):
        service_plan_filters.pd_render_files({"hosts": {}})


def test_a_worker_plan_is_the_launch_its_container_and_its_script():
    worker = workers({"p0": {"sglang_pd_service_address": "10.0.0.1"}}, "prefill")[0]
    role_vars = {**rv(api_key="k"), **CONTAINER_VARS, "sglang_worker_image": "repo@sha256:" + "a" * 64,
                 "sglang_worker_stop_timeout": 120}
    plan = sp.worker_plan(worker, role_vars, devices=["/dev/kfd"], groups=["44"], managed="managed here")
    assert plan["launch"] == sp.worker_launch(worker, role_vars)
    assert plan["docker_argv"] == ["/usr/bin/docker", "run"] + plan["docker_args"] + [plan["image"]] + plan["launch"]["argv"]
    assert ["--device", "/dev/kfd"] == plan["docker_args"][plan["docker_args"].index("--device"):][:2]
    assert plan["script"] == sp.launch_script(plan["docker_argv"], "SGLang prefill worker on port 30100", "managed here")
    assert (plan["env"], plan["secret"]) == (plan["launch"]["env"], {"args": ["--api-key", "k"]})
    assert (plan["secret_file"], plan["stop_timeout"], plan["ready_gate"]) == ("/etc/sglang-pd/sglang-prefill.secret.json", 120, {})


def test_a_router_plan_gates_its_port_until_it_is_ready():
    prefills, decodes = _router_workers()
    role_vars = {**ROUTER_VARS, "sglang_router_ready_path": "/readiness", "sglang_router_ready_timeout": 600,
                 "sglang_service_config_dir": "/srv/pd"}
    plan = sp.router_plan(prefills, decodes, role_vars, "fd00::5")
    assert plan["url"] == "http://[fd00::5]:30000"
    assert plan["ready_gate"] == {"port": 30000, "url": "http://[fd00::5]:30000/readiness", "timeout": 600}
    assert plan["workers_env_file"] == "/srv/pd/sglang-router.workers.env"
    assert plan["workers_env_text"] == sp.env_file(sp.router_workers_env(prefills, decodes))


def test_the_plans_keys_are_what_the_sglang_service_role_takes():
    """A key the role's argument spec does not list fails the role's validation at deploy time."""
    spec_file = Path(__file__).parents[4] / "roles" / "sglang_service" / "meta" / "argument_specs.yml"
    spec = yaml.safe_load(spec_file.read_text())["argument_specs"]["main"]["options"]["sglang_service_plan"]["options"]
    worker = workers({"p0": {"sglang_pd_service_address": "10.0.0.1"}}, "prefill")[0]
    worker_keys = set(sp.worker_plan(worker, {**rv(), **CONTAINER_VARS}))
    router_keys = set(sp.router_plan(*_router_workers(), ROUTER_VARS, "10.0.0.9"))
    assert worker_keys <= router_keys == set(spec)
    assert {key for key, option in spec.items() if option.get("required")} <= worker_keys
