# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fabric check's parts: perftest's output read, the NIC pairs planned, the matrix written."""
from __future__ import annotations

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.mindverse.sglang_pd.plugins.filter import fabric_check as fc
from ansible_collections.mindverse.sglang_pd.plugins.filter import topology
from ansible_collections.mindverse.sglang_pd.plugins.module_utils import _amdgpu, _perftest, _rdma
from ansible_collections.mindverse.sglang_pd.tests.unit import sysfs_fixtures as fx

LINE = "-" * 87
# ib_write_bw client output in perftest's format (perftest_parameters.h RESULT_FMT_G, REPORT_FMT).
GBITS = "\n".join([
    LINE, "                    RDMA_Write BW Test",
    " Dual-port       : OFF\t\tDevice         : mlx5_ib0",
    " Number of qps   : 4\t\tTransport type : IB",
    " Link type       : IB", LINE,
    " local address: LID 0x01 QPN 0x0069 PSN 0x5b3c1f RKey 0x1fffbd VAddr 0x007f4e6b8f0000",
    LINE,
    " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]",
    " 1048576    237421           0.00               391.27 \t\t   0.046643",
    LINE, ""])
MBYTES = GBITS.replace("[Gb/sec]", "[MB/sec]").replace("0.00               391.27", "46641.21           46638.09")
# Below 0.1 Gb/s perftest prints six decimals (REPORT_FMT_EXT) and, with -C, a CPU column.
TINY = GBITS.replace(" 1048576    237421           0.00               391.27 \t\t   0.046643",
                     " 65536      5000           0.082113            0.081970            0.000156\t    12.50")
REFUSED_STDERR = "Couldn't connect to 10.0.0.11:18515\n Unable to open file descriptor for socket connection\n"
# The server of a one-sided test prints the header and no result.
SERVER = "\n".join([LINE, " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]", LINE])


@pytest.mark.parametrize("output, unit, average", [
    (GBITS, "Gb/sec", 391.27),
    (MBYTES, "MB/sec", round(46638.09 * 1048576 * 8 / 1e9, 2)),
    (TINY, "Gb/sec", 0.08),
])
def test_the_result_line_is_read_in_gbps(output, unit, average):
    parsed = fc.perftest_bw(output)
    assert parsed["ok"] and parsed["unit"] == unit and parsed["average_gbps"] == average


def test_the_whole_result_line_is_kept():
    assert _perftest.parse_bw(GBITS) == {"ok": True, "unit": "Gb/sec", "bytes": 1048576, "iterations": 237421,
                                         "peak_gbps": 0.0, "average_gbps": 391.27, "msg_rate_mpps": 0.046643}


@pytest.mark.parametrize("stdout, stderr, why", [
    ("", REFUSED_STDERR, "no result header (#bytes #iterations BW peak BW average MsgRate) in the output: "
                         "Couldn't connect to 10.0.0.11:18515"),
    (SERVER, "", "a result header but no result line in the output: #bytes"),
    (GBITS.split(" 1048576", maxsplit=1)[0], " Failed to complete run_iter_bw function successfully\n",
     "a result header but no result line in the output: Failed to complete run_iter_bw function successfully"),
])
def test_output_without_a_result_is_a_failure_saying_why(stdout, stderr, why):
    parsed = fc.perftest_bw(stdout, stderr)
    assert not parsed["ok"]
    assert parsed["error"].startswith(why), parsed["error"]


class HostVars(dict):
    """hostvars as the filters see them: host -> that host's variables."""


def node(tmp_path, host, gpus=None, mode="prefill", address=None, down=(), **topology_args):
    root = fx.topology_node(str(tmp_path / host), **topology_args)
    for device in down:
        fx.add_ib_port(root, device, state="1: DOWN", phys_state="3: Disabled")
    amdgpu, rdma = _amdgpu.collect(root), _rdma.collect(root)
    values = {"sglang_pd_fabric": {"amdgpu": amdgpu, "rdma": rdma, "pairs": topology.gpu_nic_affinity(amdgpu, rdma)},
              "sglang_pd_service_address": address or "10.0.0.%d" % (10 + len(host))}
    if gpus is not None:
        values["sglang_pd_%s_workers" % mode] = [{"gpus": gpus}]
    return values


SETTINGS = {"ib_write_bw": "ib_write_bw", "port": 18515, "min_ratio": 0.8, "min_gbps": None, "args": ["-D", "5"], "timeout": 60}


def test_eight_gpus_each_pair_gpu_i_nic_with_gpu_i_nic_in_rounds_without_a_shared_nic(tmp_path):
    hostvars = HostVars(p0=node(tmp_path, "p0", address="10.0.0.10"), p1=node(tmp_path, "p1"),
                        d0=node(tmp_path, "d0", mode="decode", address="10.0.0.20"), d1=node(tmp_path, "d1", mode="decode"))
    plan = fc.fabric_check_plan(["p0", "p1"], ["d0", "d1"], hostvars, SETTINGS)
    assert len(plan) == 32
    first = plan[0]
    assert (first["id"], first["prefill_gpus"], first["decode_gpus"]) == ("p0:mlx5_ib0->d0:mlx5_ib0", [0], [0])
    assert first["client_argv"] == ["ib_write_bw", "-d", "mlx5_ib0", "-i", "1", "-p", "18515", "--report_gbits", "-F",
                                    "-D", "5", "10.0.0.20"]
    assert first["server_argv"] == first["client_argv"][:-1]
    assert all(t["prefill_nic"] == t["decode_nic"] for t in plan)
    assert (first["rate_gbps"], first["expected_gbps"]) == (400, 320.0)
    # Every NIC is paired with two peers, so two rounds; no NIC twice in one round; one port per test.
    assert sorted({t["round"] for t in plan}) == [0, 1]
    for number in (0, 1):
        ends = [(t["prefill_host"], t["prefill_nic"]) for t in plan if t["round"] == number]
        ends += [(t["decode_host"], t["decode_nic"]) for t in plan if t["round"] == number]
        assert len(ends) == len(set(ends)) == 32
    assert sorted(t["port"] for t in plan) == list(range(18515, 18515 + 32))


def test_worker_gpu_subsets_pair_rank_by_rank_and_a_host_never_with_itself(tmp_path):
    hostvars = HostVars(a=node(tmp_path, "a", gpus=[2, 3]), b=node(tmp_path, "b", gpus="4-7", mode="decode"))
    hostvars["a"]["sglang_pd_decode_workers"] = [{"gpus": [0]}]
    plan = fc.fabric_check_plan(["a"], ["b", "a"], hostvars, SETTINGS)
    # a's ranks 0, 1 (GPUs 2, 3) against b's ranks 0-3 (GPUs 4-7): the shorter list wraps around.
    assert [(t["prefill_nic"], t["prefill_gpus"], t["decode_nic"], t["decode_gpus"]) for t in plan] == [
        ("mlx5_ib2", [2], "mlx5_ib4", [4]), ("mlx5_ib3", [3], "mlx5_ib5", [5]),
        ("mlx5_ib2", [2], "mlx5_ib6", [6]), ("mlx5_ib3", [3], "mlx5_ib7", [7])]


def test_a_nic_shared_by_several_gpus_is_measured_once(tmp_path):
    hostvars = HostVars(p=node(tmp_path, "p", nics=fx.IB_DEVICES[:1]), d=node(tmp_path, "d", mode="decode"))
    plan = fc.fabric_check_plan(["p"], ["d"], hostvars, SETTINGS)
    assert [(t["prefill_nic"], t["decode_nic"]) for t in plan] == [("mlx5_ib0", "mlx5_ib%d" % i) for i in range(8)]
    assert [t["round"] for t in plan] == list(range(8))


def test_roce_tests_pass_the_routable_gid_index_and_refuse_a_port_without_one(tmp_path):
    hostvars = HostVars(p=node(tmp_path, "p", gpus=[0], link_layer="Ethernet"),
                        d=node(tmp_path, "d", gpus=[0, 1], mode="decode", link_layer="Ethernet"))
    for host, nic, ip, v2 in (("p", "mlx5_ib0", "10.0.0.5", True), ("d", "mlx5_ib0", "10.0.0.6", True),
                              ("d", "mlx5_ib1", "10.0.0.7", False)):
        fx.add_roce_gids(str(tmp_path / host), nic, ip, "eth%s" % nic[-1], v2=v2)
        hostvars[host]["sglang_pd_fabric"]["rdma"] = _rdma.collect(str(tmp_path / host))
        hostvars[host]["sglang_pd_cluster_cidr"] = "10.0.0.0/16"
    plan = fc.fabric_check_plan(["p"], ["d"], hostvars, SETTINGS)
    assert plan[0]["server_argv"][5:7] == ["-x", "3"] and plan[0]["client_argv"][5:7] == ["-x", "3"]
    assert plan[1]["round"] is None and plan[1]["problem"].startswith(
        "d NIC mlx5_ib1 is RoCE without a RoCE v2 GID in 10.0.0.0/16: give its network device eth1 an address in 10.0.0.0/16")


def test_missing_facts_a_down_port_and_an_unknown_rate_are_named(tmp_path):
    hostvars = HostVars(p=node(tmp_path, "p", gpus=[0, 1]), d=node(tmp_path, "d", gpus=[0, 1], mode="decode", down=("mlx5_ib1",)),
                        gone={"sglang_pd_service_address": "10.0.0.99"})
    plan = fc.fabric_check_plan(["p", "gone"], ["d"], hostvars, SETTINGS)
    assert plan[1]["problem"] == "d NIC mlx5_ib1 port 1 is DOWN, not ACTIVE: bring the link up (ibstat mlx5_ib1) before measuring it."
    assert plan[2]["id"] == "gone->d" and plan[2]["problem"].startswith("gone has no fabric facts (sglang_pd_fabric)")
    for port in hostvars["p"]["sglang_pd_fabric"]["rdma"]["devices"][0]["ports"] + hostvars["d"]["sglang_pd_fabric"]["rdma"]["devices"][0]["ports"]:
        port["rate_gbps"] = None
    plan = fc.fabric_check_plan(["p"], ["d"], hostvars, SETTINGS)
    assert "the port rate is unknown on both NICs" in plan[0]["problem"]
    assert fc.fabric_check_plan(["p"], ["d"], hostvars, dict(SETTINGS, min_gbps="300"))[0]["expected_gbps"] == 300.0
    with pytest.raises(AnsibleFilterError, match="leaves no room"):
        fc.fabric_check_plan(["p"], ["d"], hostvars, dict(SETTINGS, min_gbps=300, port=65536))


def client_result(test, stdout, rc=0, stderr=""):
    return {"item": {"item": test}, "finished": 1, "rc": rc, "stdout": stdout, "stderr": stderr}


def test_the_report_judges_each_pair_and_names_the_failing_ones(tmp_path):
    hostvars = HostVars(p0=node(tmp_path, "p0", gpus=[0, 1, 2, 3]), d0=node(tmp_path, "d0", gpus=[0, 1, 2, 3], mode="decode"))
    plan = fc.fabric_check_plan(["p0"], ["d0"], hostvars, SETTINGS)
    ok, slow, refused, hung = plan
    clients = [client_result(ok, GBITS), client_result(slow, GBITS.replace("391.27", "212.50")),
               client_result(refused, "", rc=1, stderr=REFUSED_STDERR), client_result(hung, GBITS.split(" 1048576", maxsplit=1)[0], rc=124)]
    hostvars["p0"]["__sglang_pd_fabric_results"] = fc.fabric_check_records(clients, "client")
    hostvars["d0"]["__sglang_pd_fabric_results"] = fc.fabric_check_records([client_result(ok, SERVER)], "server")
    hostvars["d0"]["__sglang_pd_fabric_listening"] = [ok["id"], slow["id"], refused["id"], hung["id"]]
    report = fc.fabric_check_report(plan, hostvars, ["p0", "d0"], SETTINGS)
    assert [p["status"] for p in report["pairs"]] == ["pass", "slow", "error", "error"]
    assert report["summary"] == {"pairs": 4, "passed": 1, "slow": 1, "error": 2}
    assert report["nodes"] == {"p0": {"d0": {"pairs": 4, "passed": 1, "min_gbps": 212.5, "status": "fail"}}}
    assert report["pairs"][0]["server_output"] == SERVER
    slow_msg, refused_msg, hung_msg = report["failures"]
    assert slow_msg.startswith("p0 mlx5_ib1 (GPU 1) -> d0 mlx5_ib1 (GPU 1): measured 212.50 Gb/s, expected at least "
                               "320.00 Gb/s (80% of the 400 Gb/s port rate). Check both ports (ibstat mlx5_ib1 on p0, "
                               "ibstat mlx5_ib1 on d0")
    assert refused_msg.startswith("p0 mlx5_ib2 (GPU 2) -> d0 mlx5_ib2 (GPU 2): ib_write_bw measured nothing (rc 1): no "
                                  "result header")
    assert "Couldn't connect to 10.0.0.11:18515" in refused_msg and "on TCP port 18517 (firewall)" in refused_msg
    assert hung_msg.startswith("p0 mlx5_ib3 (GPU 3) -> d0 mlx5_ib3 (GPU 3): ib_write_bw measured nothing (rc 124): no "
                               "result within 60 s (sglang_pd_fabric_timeout)")


def test_a_server_that_never_listens_and_a_planned_problem_are_failures(tmp_path):
    hostvars = HostVars(p0=node(tmp_path, "p0", gpus=[0, 1]), d0=node(tmp_path, "d0", gpus=[0, 1], mode="decode", down=("mlx5_ib1",)))
    plan = fc.fabric_check_plan(["p0"], ["d0"], hostvars, SETTINGS)
    hostvars["d0"]["__sglang_pd_fabric_results"] = [
        {"id": plan[0]["id"], "side": "server", "rc": 1, "finished": True, "stdout": "",
         "stderr": " Couldn't get context for the device\n"}]
    report = fc.fabric_check_report(plan, hostvars, ["p0", "d0"], SETTINGS)
    assert report["failures"][0].startswith(
        "p0 mlx5_ib0 (GPU 0) -> d0 mlx5_ib0 (GPU 0): the ib_write_bw server on d0 (mlx5_ib0, TCP port 18515) did not start "
        "listening: Couldn't get context for the device.")
    assert report["failures"][1].startswith("p0 mlx5_ib1 (GPU 1) -> d0 mlx5_ib1 (GPU 1): not measured: d0 NIC mlx5_ib1 port 1 is DOWN")


def test_the_markdown_matrix_lists_every_pair(tmp_path):
    hostvars = HostVars(p0=node(tmp_path, "p0", gpus=[0]), p1=node(tmp_path, "p1", gpus=[1]),
                        d0=node(tmp_path, "d0", gpus=[0], mode="decode"))
    plan = fc.fabric_check_plan(["p0", "p1"], ["d0"], hostvars, SETTINGS)
    hostvars["p0"]["__sglang_pd_fabric_results"] = fc.fabric_check_records([client_result(plan[0], GBITS)], "client")
    hostvars["p1"]["__sglang_pd_fabric_results"] = fc.fabric_check_records(
        [client_result(plan[1], GBITS.replace("391.27", "100.00"))], "client")
    hostvars["d0"]["__sglang_pd_fabric_listening"] = [plan[0]["id"], plan[1]["id"]]
    markdown = fc.fabric_check_markdown(fc.fabric_check_report(plan, hostvars, ["p0", "p1", "d0"], SETTINGS))
    assert "2 NIC pairs: 1 pass, 1 below the threshold, 0 not measured." in markdown
    assert "| prefill \\ decode | d0 |" in markdown
    assert "| p0 | pass 1/1, min 391.27 Gb/s |" in markdown
    assert "| p1 | **FAIL** 0/1, min 100.00 Gb/s |" in markdown
    assert "| p0 | mlx5_ib0 | 0 | d0 | mlx5_ib0 | 0 | 391.27 | 320.00 | 400.00 | pass |" in markdown
    assert "| p1 | mlx5_ib1 | 1 | d0 | mlx5_ib0 | 0 | 100.00 | 320.00 | 400.00 | **SLOW** |" in markdown
    assert "## Failures\n\n- p1 mlx5_ib1 (GPU 1) -> d0 mlx5_ib0 (GPU 0): measured 100.00 Gb/s" in markdown
    assert fc.fabric_check_commands(plan)[0].startswith("p0:mlx5_ib0->d0:mlx5_ib0: round 0, on d0: ib_write_bw -d mlx5_ib0")
