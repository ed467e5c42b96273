# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Launch-script filters: read what a service runs, rewrite the router's worker list."""

from __future__ import annotations

import base64

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.mindverse.sglang_pd.plugins.filter.pd import (
    docker_run_argv,
    pd_workers,
    sglang_router_argv,
    sglang_server_argv,
    shell_join,
)
from ansible_collections.mindverse.sglang_pd.plugins.filter.pd_scale import (
    FilterModule,
    pd_launch_argv,
    pd_launch_router,
    pd_launch_services,
    pd_launch_with_workers,
    pd_launch_worker,
    pd_router_worker_spec,
)

IMAGE = "reg.example:5443/mindverse/sglang@sha256:" + "a" * 64
HOSTVARS = {
    "p0": {"sglang_pd_service_address": "10.0.0.11"},
    "p1": {"sglang_pd_service_address": "10.0.0.12", "sglang_pd_bootstrap_port": 9000},
    "d0": {"sglang_pd_service_address": "10.0.0.13"},
    "d1": {"sglang_pd_service_address": "10.0.0.14", "sglang_pd_decode_workers": [{"port": 30200}, {"port": 30201}]},
    "d2": {"sglang_pd_service_address": "fd00::15"},
}
OPTIONS = {"policy": "cache_aware", "host": "0.0.0.0", "port": 8000, "api_key": "s3cret word"}


def script(argv, description="SGLang PD router on port 8000"):
    """A launch script as roles/sglang_service/templates/launch.sh.j2 renders it."""
    return "#!/bin/sh\n# Ansible managed\n# %s\nexec %s\n" % (description, shell_join(argv))


def router_script(prefill_hosts, decode_hosts, options=None):
    prefills = pd_workers(prefill_hosts, HOSTVARS, "prefill")
    decodes = pd_workers(decode_hosts, HOSTVARS, "decode")
    command = sglang_router_argv(prefills, decodes, OPTIONS if options is None else options)
    container = {"name": "sglang-router", "network": "host", "env_file": "/etc/sglang-pd/sglang-router.env"}
    return script(docker_run_argv(container, IMAGE, command))


def worker_script(host, mode, index=0):
    worker = pd_workers([host], HOSTVARS, mode)[index]
    command = sglang_server_argv(worker, {"host": "0.0.0.0", "model_path": "/models/glm", "tp_size": 8})
    container = {"name": worker["name"], "network": "host", "shm_size": "64g", "ulimits": ["memlock=-1:-1"]}
    return script(docker_run_argv(container, IMAGE, command), "SGLang %s worker" % mode)


def test_filters_are_registered():
    assert sorted(FilterModule().filters()) == [
        "pd_launch_argv", "pd_launch_router", "pd_launch_services", "pd_launch_with_workers", "pd_launch_worker",
        "pd_router_worker_spec"]


def test_argv_round_trips_quoting():
    text = router_script(["p0"], ["d0"])
    argv = pd_launch_argv(text)
    assert argv[:3] == ["/usr/bin/docker", "run", "--rm"]
    assert "s3cret word" in argv


@pytest.mark.parametrize("host, mode, index, expected", [
    ("p0", "prefill", 0, {"mode": "prefill", "port": 30100, "bootstrap_port": 8998}),
    ("p1", "prefill", 0, {"mode": "prefill", "port": 30100, "bootstrap_port": 9000}),
    ("d0", "decode", 0, {"mode": "decode", "port": 30200, "bootstrap_port": None}),
    ("d1", "decode", 1, {"mode": "decode", "port": 30201, "bootstrap_port": None}),
])
def test_worker_script_is_read(host, mode, index, expected):
    expected = dict(expected, image=IMAGE)
    assert pd_launch_worker(worker_script(host, mode, index)) == expected


def test_router_script_is_not_a_worker():
    assert pd_launch_worker(router_script(["p0"], ["d0"])) is None


def test_router_script_is_read():
    info = pd_launch_router(router_script(["p0", "p1"], ["d0", "d2"]))
    assert info == {
        "port": 8000,
        "host": "0.0.0.0",
        "api_key": "s3cret word",
        "prefills": [{"url": "http://10.0.0.11:30100", "bootstrap_port": 8998},
                     {"url": "http://10.0.0.12:30100", "bootstrap_port": 9000}],
        "decodes": [{"url": "http://10.0.0.13:30200"}, {"url": "http://[fd00::15]:30200"}],
        "image": IMAGE,
    }


def test_router_defaults_when_flags_are_missing():
    info = pd_launch_router(router_script(["p0"], ["d0"], options={}))
    assert (info["port"], info["host"], info["api_key"]) == (30000, None, None)


def test_worker_script_is_not_a_router():
    assert pd_launch_router(worker_script("d0", "decode")) is None


@pytest.mark.parametrize("before, after", [
    ((["p0"], ["d0"]), (["p0"], ["d0", "d1"])),            # scale out: two decode workers of one host
    ((["p0"], ["d0", "d1"]), (["p0"], ["d0"])),            # scale in
    ((["p0", "p1"], ["d0"]), (["p1"], ["d0", "d2"])),      # both at once
    ((["p0"], ["d0"]), (["p0"], ["d0"])),                  # nothing to do
])
def test_rewrite_equals_what_the_role_renders(before, after):
    """The rewritten script is byte for byte the one the role renders for the new inventory."""
    old = router_script(*before)
    new = pd_launch_with_workers(old, pd_workers(after[0], HOSTVARS, "prefill"),
                                 pd_workers(after[1], HOSTVARS, "decode"))
    assert new == router_script(*after)


def test_rewrite_keeps_flags_the_filters_do_not_know():
    argv = pd_launch_argv(router_script(["p0"], ["d0"]))
    argv += ["--health-check-interval-secs", "5", "--prometheus-port", "29000"]
    new = pd_launch_with_workers(script(argv), pd_workers(["p1"], HOSTVARS, "prefill"), [])
    new_argv = pd_launch_argv(new)
    assert "--decode" not in new_argv
    at = new_argv.index("--prefill")
    assert new_argv[at:at + 3] == ["--prefill", "http://10.0.0.12:30100", "9000"]
    assert new_argv[at + 3:] == argv[argv.index("--policy"):]
    assert new.startswith("#!/bin/sh\n# Ansible managed\n# SGLang PD router on port 8000\nexec ")


def test_rewrite_of_a_router_without_workers_inserts_after_pd_flag():
    old = router_script([], [])
    new = pd_launch_with_workers(old, [], pd_workers(["d0"], HOSTVARS, "decode"))
    argv = pd_launch_argv(new)
    at = argv.index("--pd-disaggregation")
    assert argv[at + 1:at + 3] == ["--decode", "http://10.0.0.13:30200"]


@pytest.mark.parametrize("text, message", [
    ("#!/bin/sh\necho hi\n", "no 'exec' line"),
    ("#!/bin/sh\nexec 'unterminated\n", "cannot parse"),
    (None, "expected the text"),
])
def test_bad_scripts_are_refused(text, message):
    with pytest.raises(AnsibleFilterError, match=message):
        pd_launch_argv(text)


def test_rewrite_refuses_a_worker_script():
    with pytest.raises(AnsibleFilterError, match="does not run python -m sglang_router"):
        pd_launch_with_workers(worker_script("d0", "decode"), [], [])


def test_rewrite_refuses_split_worker_flags():
    argv = pd_launch_argv(router_script(["p0"], ["d0"]))
    at = argv.index("--decode")
    argv = argv[:at] + ["--policy", "random"] + argv[at:]
    with pytest.raises(AnsibleFilterError, match="not next to each other"):
        pd_launch_with_workers(script(argv), [], [])


def slurped(path, text):
    return {"source": path, "content": base64.b64encode(text.encode()).decode(), "encoding": "base64"}


def test_services_of_a_host_from_slurped_scripts():
    files = [
        slurped("/etc/sglang-pd/sglang-router.sh", router_script(["p0"], ["d0"])),
        slurped("/etc/sglang-pd/sglang-decode-1.sh", worker_script("d1", "decode", 1)),
        slurped("/etc/sglang-pd/sglang-decode.sh", worker_script("d1", "decode", 0)),
        {"skipped": True, "item": "/etc/sglang-pd/gone.sh"},
    ]
    services = pd_launch_services(files, "fd00::14")
    assert [(s["name"], s["mode"], s["port"], s["url"]) for s in services] == [
        ("sglang-decode", "decode", 30200, "http://[fd00::14]:30200"),
        ("sglang-decode-1", "decode", 30201, "http://[fd00::14]:30201"),
    ]
    assert services[0]["path"] == "/etc/sglang-pd/sglang-decode.sh"
    assert services[0]["image"] == IMAGE


def test_services_refuse_content_that_is_not_base64():
    with pytest.raises(AnsibleFilterError, match="/x.sh: the content is not base64"):
        pd_launch_services([{"source": "/x.sh", "content": "not base64!"}], "10.0.0.1")


def test_router_worker_specs():
    prefill = pd_workers(["p1"], HOSTVARS, "prefill")[0]
    decode = pd_workers(["d0"], HOSTVARS, "decode")[0]
    assert pd_router_worker_spec(prefill) == {"url": "http://10.0.0.12:30100", "worker_type": "prefill", "bootstrap_port": 9000}
    assert pd_router_worker_spec(decode) == {"url": "http://10.0.0.13:30200", "worker_type": "decode"}
    with pytest.raises(AnsibleFilterError, match="expected a worker with 'mode' and 'url'"):
        pd_router_worker_spec({"url": "http://x"})
