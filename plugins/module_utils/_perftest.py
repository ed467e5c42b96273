# Copyright: (c) 2026, mindverse infrastructure team
# Apache License 2.0, compatible with the GNU General Public License v3.0+ (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""Read the result of a perftest bandwidth test (``ib_write_bw``) from its output.

Private helper of ``perftest_bw`` (plugins/filter/fabric_check.py). The format is
perftest's own (linux-rdma/perftest, ``src/perftest_parameters.h`` and ``print_full_bw_report``
in ``src/perftest_parameters.c``), printed by the client of a one-sided test:

    ---------------------------------------------------------------------------------------
     #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]
     65536      5000             390.12             389.87             0.743619
    ---------------------------------------------------------------------------------------

The header is ``RESULT_FMT_G`` with ``--report_gbits`` and ``RESULT_FMT`` (``[MB/sec]``)
without; the line is ``REPORT_FMT`` (``" %-7lu    %-10lu       %-7.2lf            %-7.2lf
\\t\\t   %-7.6lf"``), or ``REPORT_FMT_EXT`` (six decimals) below 0.1 Gb/s, then an optional
CPU utilisation column. MB there is 2^20 bytes (``format_factor = 0x100000``), Gb is 10^9
bits (``125000000`` bytes). ``-D`` (duration) runs print a peak of 0.00: read the average.
The client prints ``Couldn't connect to <host>:<port>`` (``perftest_communication.c``) when
no server answers; then there is no result line at all.
"""

from __future__ import annotations

import re

# perftest_parameters.c: format_factor = (report_fmt == MBS) ? 0x100000 : 125000000 (bytes).
MB_PER_SEC_IN_GBPS = 0x100000 * 8 / 1e9

_HEADER = re.compile(r"^\s*#bytes\s+#iterations\s+BW peak\[(?P<unit>Gb|MB)/sec\]\s+BW average\[(?:Gb|MB)/sec\]")
_NUMBER = r"[0-9]+(?:\.[0-9]+)?"
_RESULT = re.compile(r"^\s*(?P<bytes>[0-9]+)\s+(?P<iterations>[0-9]+)\s+(?P<peak>%s)\s+(?P<average>%s)\s+(?P<rate>%s)"
                     % (_NUMBER, _NUMBER, _NUMBER))
_ERROR_HINTS = ("Couldn't", "couldn't", "Unable", "Failed", "failed", "error", "Error", "ERROR", "Conflicting")


def _first_error(text):
    """The first line of text that reads like perftest's own error message (the cause; later lines
    say what could not follow), else its last line."""
    lines = [line.strip() for line in (text or "").splitlines() if re.search(r"[A-Za-z0-9]", line)]
    for line in lines:
        if any(hint in line for hint in _ERROR_HINTS):
            return line
    return lines[-1] if lines else ""


def parse_bw(stdout, stderr=""):
    """The result of one bandwidth test: a dict with ``ok`` and, when ok, the numbers in Gb/s.

    ``{ok: true, unit: "Gb/sec", bytes, iterations, peak_gbps, average_gbps, msg_rate_mpps}``
    or ``{ok: false, error: "<why>"}`` when the output has no result line under a header
    (the test did not run to its end).
    """
    unit = None
    found = None
    for line in (stdout or "").splitlines():
        header = _HEADER.match(line)
        if header:
            unit = header.group("unit")
            continue
        if unit is None:
            continue
        result = _RESULT.match(line)
        if result:
            found = result
    if found is None:
        detail = _first_error(stderr) or _first_error(stdout)
        if unit is None:
            why = "no result header (#bytes #iterations BW peak BW average MsgRate) in the output"
        else:
            why = "a result header but no result line in the output"
        return {"ok": False, "error": why + (": " + detail if detail else "")}
    factor = 1.0 if unit == "Gb" else MB_PER_SEC_IN_GBPS
    return {
        "ok": True,
        "unit": unit + "/sec",
        "bytes": int(found.group("bytes")),
        "iterations": int(found.group("iterations")),
        "peak_gbps": round(float(found.group("peak")) * factor, 2),
        "average_gbps": round(float(found.group("average")) * factor, 2),
        "msg_rate_mpps": float(found.group("rate")),
    }
