"""The worker reads its request contract from contract.schema.json (emitted from the zod schemas
by `deno task contract:emit`): every field the contract names has a parser here, and every
default the parsers apply is the contract's."""

import dataclasses
import unittest

from reins_worker import contract
from reins_worker.validate import (
    GenerateSpec,
    LossSpec,
    OptimizerSpec,
    RequestError,
    parse_init,
    parse_loss,
)


def names(cls) -> set:
    return {f.name for f in dataclasses.fields(cls)}


class ContractTest(unittest.TestCase):
    def test_every_loss_field_has_a_slot_and_the_contract_default(self):
        fields = contract.properties(contract.node("forward_backward", "loss"))
        self.assertEqual(set(fields), names(LossSpec))
        spec = parse_loss({"kind": "ppo"})
        for key, schema in fields.items():
            if "default" in schema:
                self.assertEqual(getattr(spec, key), schema["default"], key)

    def test_every_optimizer_field_has_a_slot_and_the_contract_default(self):
        fields = contract.properties(contract.node("init", "optimizer"))
        self.assertEqual(set(fields), names(OptimizerSpec))
        defaults = OptimizerSpec().to_dict()
        for key, schema in fields.items():
            self.assertEqual(defaults[key], schema["default"], key)

    def test_init_and_generate_fields_are_all_parsed(self):
        init = set(contract.properties(contract.node("init")))
        self.assertEqual(init, {"model", "optimizer", "dtype", "device", "reference_path"})
        self.assertEqual(set(contract.properties(contract.node("generate"))), names(GenerateSpec))

    def test_enums_and_bounds_come_from_the_contract(self):
        with self.assertRaises(RequestError) as ctx:
            parse_loss({"kind": "ppo", "kl_estimator": "k4"})
        self.assertEqual(ctx.exception.field, "loss.kl_estimator")
        self.assertIn('"k1", "k2" or "k3"', ctx.exception.message)
        with self.assertRaises(RequestError) as ctx:
            parse_loss({"kind": "ppo", "clip_low": 1})  # exclusiveMaximum 1
        self.assertEqual(ctx.exception.field, "loss.clip_low")
        with self.assertRaises(RequestError) as ctx:
            parse_loss({"kind": "ppo", "kl_coef": -0.1})
        self.assertEqual(ctx.exception.field, "loss.kl_coef")
        spec = parse_init({"model": {"kind": "hf", "path": "x"}, "reference_path": "/tmp/r.pt"})
        self.assertEqual(spec.reference_path, "/tmp/r.pt")
        with self.assertRaises(RequestError) as ctx:
            parse_init({"model": {"kind": "hf", "path": "x"}, "reference_path": ""})
        self.assertEqual(ctx.exception.field, "reference_path")


if __name__ == "__main__":
    unittest.main()
