"""GPU telemetry parsers on real published tool output (``tests/data/smi/README.md`` names each source).

Multi-GPU and partitioned (CPX/DPX) MI300X cases come from AMD's own changelog and issue tracker;
``N/A`` cells are left out, never read as zero; the partitions' totals are kept per device as the
tool reported them (whole-device VRAM per partition, ROCm issue 4750), never summed.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

from specgauge.loadgen import smi

DATA = Path(__file__).resolve().parents[1] / "data" / "smi"


def _read(name: str) -> str:
    return (DATA / name).read_text(encoding="utf-8")


def test_amd_smi_metric_json_power_list_form() -> None:
    # amd-smi metric -p --json (ROCm 6.1 changelog): list form, {value, unit} leaves, no mem_usage asked
    rows = smi.parse_amd_smi(_read("amd-smi_metric_power_json_rocm6.1.json"))
    assert rows == [{"device": 0.0, "power_w": 10.0}]  # no memory keys: not measured is not zero


def test_amd_smi_metric_json_gpu_data_envelope_on_a_dpx_partition() -> None:
    # ROCm 7.0.2 (issue #134): {"gpu_data": [...]}; usage carries per-XCP lists mixing {value,unit} and "N/A"
    text = _read("amd-smi_metric_usage_dpx_mi300x_rocm7.0.2.txt")
    usage_repr = text.splitlines()[3]
    usage_repr = usage_repr[: usage_repr.index(", 'jpeg_busy'")] + "}"  # the stored excerpt ends mid-jpeg_busy
    usage = ast.literal_eval(usage_repr)
    assert text.splitlines()[1] == "0"  # rocm_metrics['gpu_data'][0]['gpu']
    doc = json.dumps({"gpu_data": [{"gpu": 0, "usage": usage}]})
    assert smi.parse_amd_smi(doc) == [{"device": 0.0, "util_pct": 0.0}]
    assert smi.amd_smi_devices(json.loads(doc)) == smi.amd_smi_devices([{"gpu": 0, "usage": usage}])


def test_amd_smi_metric_json_memory_in_the_clis_own_shape() -> None:
    # No published `metric --mem-usage --json` capture exists; the document below has the shape the
    # CLI's code writes (amdsmi_commands.py mem_usage block at 0ceca28: MB = bytes // 2**20, "N/A" when
    # unreadable) and the real values of the 8x MI300X monitor capture (ROCm 6.1 changelog).
    rows = smi.parse_amd_smi_monitor(_read("amd-smi_monitor_mi300x_8gpu_rocm6.1.txt"))
    doc = [{"gpu": int(r["device"]),
            "mem_usage": {"total_vram": {"value": int(r["total_mib"]), "unit": "MB"},
                          "used_vram": {"value": int(r["used_mib"]), "unit": "MB"},
                          "free_vram": {"value": int(r["total_mib"] - r["used_mib"]), "unit": "MB"},
                          "total_gtt": "N/A", "used_gtt": "N/A", "free_gtt": "N/A"},
            "power": {"socket_power": {"value": int(r["power_w"]), "unit": "W"}, "gfx_voltage": "N/A"},
            "usage": {"gfx_activity": {"value": int(r["util_pct"]), "unit": "%"}, "mm_activity": "N/A"}} for r in rows]
    for payload in (doc, {"gpu_data": doc}):  # ROCm <= 6.3 list, ROCm 6.4+ envelope
        text = "WARNING: User is missing the following required groups: render\n" + json.dumps(payload, indent=4)
        assert smi.parse_amd_smi(text) == rows


def test_amd_smi_monitor_eight_mi300x() -> None:
    rows = smi.parse_amd_smi_monitor(_read("amd-smi_monitor_mi300x_8gpu_rocm6.1.txt"))
    assert [r["device"] for r in rows] == list(range(8))
    assert rows[0] == {"device": 0.0, "used_mib": 283.0, "total_mib": 196300.0, "power_w": 171.0, "util_pct": 0.0}
    assert rows[4]["used_mib"] == 284.0 and rows[4]["power_w"] == 178.0


def test_amd_smi_monitor_cpx_every_partition_reports_the_whole_device() -> None:
    rows = smi.parse_amd_smi_monitor(_read("amd-smi_monitor_cpx_rocm6.3.txt"))
    assert len(rows) == 32 and [r["device"] for r in rows] == list(range(32))
    assert {r["total_mib"] for r in rows} == {196300.0}  # as reported; specgauge never adds them up
    assert rows[0]["power_w"] == 248.0 and rows[31]["power_w"] == 227.0
    assert all("util_pct" not in r for r in rows)  # not asked for (-p -t -v)


def test_amd_smi_monitor_cpx_partitions_vram_usage_and_na_cells() -> None:
    rows = smi.parse_amd_smi_monitor(_read("amd-smi_monitor_cpx_partitions_rocm6.4.1.txt"))
    assert len(rows) == 9
    assert rows[0] == {"device": 0.0, "used_mib": 0.3 * 1024, "total_mib": 192.0 * 1024, "power_w": 202.0, "util_pct": 0.0}
    assert rows[1] == {"device": 1.0, "used_mib": 0.5 * 1024, "total_mib": 24.0 * 1024}  # N/A power and GFX%: absent
    assert rows[8]["power_w"] == 210.0 and rows[8]["total_mib"] == 192.0 * 1024


def test_amd_smi_monitor_vram_used_free_total() -> None:
    rows = smi.parse_amd_smi_monitor(_read("amd-smi_monitor_vram_rocm6.5.txt"))
    assert rows == [{"device": 0.0, "used_mib": 174.0, "total_mib": 16185.0}, {"device": 1.0, "used_mib": 78.0, "total_mib": 425.0}]


def test_rocm_smi_json_strings_and_extra_fields() -> None:
    rows = smi.parse_rocm_smi(_read("rocm-smi_showmeminfo_vram_showuse_rx7900xt.json"))
    assert rows == [{"device": 0.0, "used_mib": 27856896 / 2**20, "total_mib": 21458059264 / 2**20, "util_pct": 0.0}]


def test_rocm_smi_json_without_vram_fields_gives_no_memory() -> None:
    rows = smi.parse_rocm_smi(_read("rocm-smi_showmemuse_2x_rx6800.json"))
    assert rows == [{"device": 0.0}, {"device": 1.0}]


def test_rocm_smi_plain_log_cpx_partitions() -> None:
    rows = smi.parse_rocm_smi(_read("rocm-smi_showmeminfo_vram_cpx_mi300x.txt"))  # not JSON: the log fallback
    assert [r["device"] for r in rows] == list(range(7))
    assert all(r["total_mib"] == 206141652992 / 2**20 and r["used_mib"] == 297771008 / 2**20 for r in rows)


def test_nvidia_smi_with_power_and_utilisation_and_na() -> None:
    rows = smi.parse_nvidia_smi("0, 1234, 81559, 312.45, 97\n1, 3, 81559, [N/A], [N/A]\n")
    assert rows == [{"device": 0.0, "used_mib": 1234.0, "total_mib": 81559.0, "power_w": 312.45, "util_pct": 97.0},
                    {"device": 1.0, "used_mib": 3.0, "total_mib": 81559.0}]


def test_garbage_is_a_value_error_or_nothing() -> None:
    assert smi.parse_amd_smi_monitor("command not found\n") == []
    assert smi.parse_rocm_smi("no devices\n") == []
    try:
        smi.parse_amd_smi("ERROR: amdgpu driver not loaded\n")
    except ValueError:
        pass
    else:  # pragma: no cover
        raise AssertionError("amd-smi text without JSON must not parse as a device list")
