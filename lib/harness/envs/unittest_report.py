"""Runs a repository's unittest suite and reports every test's outcome as JSON.

Usage (from the repository root): python3 -c "$(cat unittest_report.py)" TEST_DIR [TEST_ID ...]

Prints unittest's usual summary ("Ran N tests", "OK" / "FAILED (...)"), then one line
`@@reins-unittest-report@@{json}` mapping each test id to {"status", "line", "error"}: status is
ok, fail, error or skip; for a failure, `line` is the test's source line that failed and
`error` the exception's last line. Exit status 0 iff every test passed.
"""

import json
import os
import sys
import traceback
import unittest

MARKER = "@@reins-unittest-report@@"


def describe(status, test, err, test_dir):
    exc_type, exc, tb = err
    line = ""
    for frame in traceback.extract_tb(tb):
        path = os.path.relpath(frame.filename)
        if path.startswith(test_dir + os.sep) and frame.line:
            line = frame.line.strip()
    text = "".join(traceback.format_exception_only(exc_type, exc)).strip().splitlines()
    return {"status": status, "line": line, "error": text[-1][:300] if text else exc_type.__name__}


class Report(unittest.TestResult):
    def __init__(self, test_dir):
        super().__init__()
        self.test_dir = test_dir
        self.outcomes = {}

    def addSuccess(self, test):
        super().addSuccess(test)
        self.outcomes[test.id()] = {"status": "ok"}

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self.outcomes[test.id()] = describe("fail", test, err, self.test_dir)

    def addError(self, test, err):
        super().addError(test, err)
        self.outcomes[test.id()] = describe("error", test, err, self.test_dir)

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self.outcomes[test.id()] = {"status": "skip"}

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self.outcomes[test.id()] = {"status": "ok"}

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self.outcomes[test.id()] = {"status": "fail", "line": "", "error": "unexpected success"}


def main():
    test_dir = os.path.normpath(sys.argv[1] if len(sys.argv) > 1 else "tests")
    ids = sys.argv[2:]
    top = os.getcwd()
    sys.path.insert(0, top)
    loader = unittest.TestLoader()
    suite = loader.loadTestsFromNames(ids) if ids else loader.discover(test_dir, top_level_dir=top)
    report = Report(test_dir)
    suite.run(report)
    failed = sum(1 for o in report.outcomes.values() if o["status"] == "fail")
    errors = sum(1 for o in report.outcomes.values() if o["status"] == "error")
    for test_id, o in sorted(report.outcomes.items()):
        if o["status"] in ("fail", "error"):
            print(f"{o['status'].upper()}: {test_id}\n    {o['line']}\n  {o['error']}")
    print(f"Ran {report.testsRun} tests")
    print("OK" if failed + errors == 0 else f"FAILED (failures={failed}, errors={errors})")
    sys.stdout.flush()
    print("\n" + MARKER + json.dumps(report.outcomes, sort_keys=True))
    sys.exit(0 if failed + errors == 0 and report.testsRun > 0 else 1)


main()
