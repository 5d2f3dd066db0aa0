"""Row parsing: derived predecessors and positions for linear, packed and tree rows."""

import unittest


from reins_worker.validate import RequestError, parse_loss, parse_optimizer, parse_row


def raw(tokens, **extra):
    n = len(tokens)
    base = {
        "tokens": tokens,
        "loss_mask": [0] * n,
        "advantages": [0] * n,
        "loss_weights": [0] * n,
        "rollout_logprobs": [0] * n,
    }
    base.update(extra)
    return base


class ValidateTest(unittest.TestCase):
    def test_linear(self) -> None:
        r = parse_row(raw([1, 2, 3]), "rows[0]", 10, 10)
        self.assertEqual(r.pred, [-1, 0, 1])
        self.assertEqual(r.positions, [0, 1, 2])
        self.assertTrue(r.linear)

    def test_packed_resets_positions(self) -> None:
        r = parse_row(raw([1, 2, 3, 4, 5], segment_starts=[0, 2]), "rows[0]", 10, 10)
        self.assertEqual(r.pred, [-1, 0, -1, 2, 3])
        self.assertEqual(r.positions, [0, 1, 0, 1, 2])
        self.assertEqual(r.segment, [0, 0, 1, 1, 1])
        self.assertFalse(r.linear)

    def test_tree_positions_are_depths(self) -> None:
        r = parse_row(raw([1, 2, 3, 4, 5], parent=[-1, 0, 1, 1, 3]), "rows[0]", 10, 10)
        self.assertEqual(r.pred, [-1, 0, 1, 1, 3])
        self.assertEqual(r.positions, [0, 1, 2, 2, 3])

    def test_sequence_ids_set_the_sequences(self) -> None:
        # A shared-prefix tree row: prompt [0, 1] shared, two samples branch off token 1.
        body = raw([1, 2, 3, 4, 5], parent=[-1, 0, 1, 2, 1], sequence_ids=[0, 0, 0, 0, 1])
        r = parse_row(body, "rows[0]", 10, 10)
        self.assertEqual(r.sequence, [0, 0, 0, 0, 1])
        self.assertEqual(r.positions, [0, 1, 2, 3, 2])
        # Without sequence_ids a row's sequences are its packed segments.
        packed = parse_row(raw([1, 2, 3, 4], segment_starts=[0, 2]), "rows[0]", 10, 10)
        self.assertEqual(packed.sequence, [0, 0, 1, 1])

    def test_errors_name_the_field(self) -> None:
        cases = [
            (raw([1, 2], parent=[-1, 1]), "rows[3].parent[1]"),
            (raw([1, 2, 3], segment_starts=[0, 2], parent=[-1, 0, 1]), "rows[3].parent[2]"),
            (raw([1, 2], loss_mask=[1, 0]), "rows[3].loss_mask[0]"),
            (raw([1, 12]), "rows[3].tokens[1]"),
            (raw([1, 2], advantages=[0, float("nan")]), "rows[3].advantages[1]"),
            (raw(list(range(1, 11)) + [1]), "rows[3].tokens"),
            (raw([1, 2], sequence_ids=[0]), "rows[3].sequence_ids"),
            (raw([1, 2], sequence_ids=[0, -1]), "rows[3].sequence_ids[1]"),
            (raw([1, 2], sequence_ids=[0, 2]), "rows[3].sequence_ids[1]"),
            (raw([1, 2], sequence_ids="0"), "rows[3].sequence_ids"),
        ]
        for body, field in cases:
            with self.assertRaises(RequestError) as ctx:
                parse_row(body, "rows[3]", 12, 10)
            self.assertEqual(ctx.exception.field, field)
            self.assertEqual(ctx.exception.status, 400)


if __name__ == "__main__":
    unittest.main()


class OptimizerSpecTest(unittest.TestCase):
    def test_warmup_is_linear_then_constant(self) -> None:
        spec = parse_optimizer({"lr": 1e-3, "warmup_steps": 4})
        self.assertEqual(
            [round(spec.lr_at(k), 12) for k in range(6)],
            [2.5e-4, 5e-4, 7.5e-4, 1e-3, 1e-3, 1e-3],
        )
        self.assertEqual(parse_optimizer({"lr": 1e-3}).lr_at(0), 1e-3)

    def test_warmup_errors_name_the_field(self) -> None:
        with self.assertRaises(RequestError) as ctx:
            parse_optimizer({"warmup_steps": -1})
        self.assertIn("optimizer.warmup_steps", str(ctx.exception.field) + ctx.exception.message)


class LossSpecTest(unittest.TestCase):
    def test_gspo_sequence_names_what_the_sequence_ids_stand_for(self) -> None:
        self.assertEqual(parse_loss({"kind": "gspo"}).gspo_sequence, "sample")
        per_call = parse_loss({"kind": "gspo", "gspo_sequence": "call"})
        self.assertEqual(per_call.gspo_sequence, "call")
        with self.assertRaises(RequestError) as ctx:
            parse_loss({"kind": "gspo", "gspo_sequence": "turn"})
        self.assertEqual(ctx.exception.field, "loss.gspo_sequence")
