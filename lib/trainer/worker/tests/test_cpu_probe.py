"""The start-up CPU probe: a positive matmul rate, the BLAS named, a warning only when slow."""

import unittest
from unittest import mock

from reins_worker.tools import cpu_probe


class CpuProbeTest(unittest.TestCase):
    def test_rate_and_library(self) -> None:
        probe = cpu_probe.cpu_probe()
        self.assertGreater(probe["cpu_matmul_gflops"], 0.0)
        self.assertIsInstance(probe["blas"], str)
        self.assertGreaterEqual(probe["torch_threads"], 1)
        slow = probe["cpu_matmul_gflops"] < cpu_probe.SLOW_GFLOPS
        self.assertEqual(probe["cpu_warning"] is not None, slow)

    def test_reference_blas_warning_names_the_fix(self) -> None:
        with mock.patch.object(cpu_probe, "matmul_gflops", return_value=4.6), mock.patch.object(
            cpu_probe, "blas_library", return_value="reference"
        ):
            probe = cpu_probe.cpu_probe()
        self.assertIn("apt-get install libopenblas0-pthread", probe["cpu_warning"])
        self.assertIn("4.6 GFLOP/s", probe["cpu_warning"])

    def test_fast_machine_has_no_warning(self) -> None:
        with mock.patch.object(cpu_probe, "matmul_gflops", return_value=250.0):
            self.assertIsNone(cpu_probe.cpu_probe()["cpu_warning"])


if __name__ == "__main__":
    unittest.main()
