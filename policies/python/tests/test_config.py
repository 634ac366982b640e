"""`parse_config` and `Field`: declared types and ranges, numbers as numbers,
unknown fields refused, errors that name the field and the fix."""

import unittest

from wasmgpu_policy import Field, PolicyError, parse_config

FIELDS = {
    "weight": Field(0.5, min=0, max=1),
    "minFreeMiB": Field(0, type=int, min=0),
    "zoneLabel": "topology.kubernetes.io/zone",
    "nvlink": Field("prefer", choices=("prefer", "require", "ignore")),
    "spread": True,
    "cap": Field(None, type=int, max=64),
}


class Config(unittest.TestCase):
    def test_empty_gives_the_defaults(self):
        for empty in ("", "  \n", "{}"):
            self.assertEqual(parse_config(empty, FIELDS), {
                "weight": 0.5, "minFreeMiB": 0, "zoneLabel": "topology.kubernetes.io/zone",
                "nvlink": "prefer", "spread": True, "cap": None,
            })

    def test_zero_is_a_fine_float_and_numbers_are_numbers(self):
        self.assertEqual(parse_config('{"weight": 0}', FIELDS)["weight"], 0.0)
        self.assertIsInstance(parse_config('{"weight": 0}', FIELDS)["weight"], float)
        self.assertEqual(parse_config('{"weight": 1}', FIELDS)["weight"], 1.0)
        self.assertEqual(parse_config('{"weight": 0.25}', FIELDS)["weight"], 0.25)
        # The older form: a float default takes any number too.
        self.assertEqual(parse_config('{"x": 0}', {"x": 1.5}), {"x": 0.0})
        self.assertEqual(parse_config('{"minFreeMiB": 8192, "cap": 8}', FIELDS)["minFreeMiB"], 8192)

    def test_an_unknown_key_is_refused_naming_it_and_the_known_ones(self):
        with self.assertRaises(PolicyError) as e:
            parse_config('{"wieght": 1}', FIELDS)
        message = str(e.exception)
        self.assertTrue(message.startswith("invalid policy config.json: unknown field `wieght`"), message)
        self.assertIn("expected one of `weight`, `minFreeMiB`, `zoneLabel`, `nvlink`, `spread`, `cap`", message)
        self.assertIn("remove it or fix its spelling", message)
        with self.assertRaisesRegex(PolicyError, "unknown field `Weight`.*did you mean `weight`"):
            parse_config('{"Weight": 1}', FIELDS)

    def test_a_value_out_of_range_names_the_field_and_the_range(self):
        with self.assertRaises(PolicyError) as e:
            parse_config('{"weight": 1.5}', FIELDS)
        self.assertEqual(str(e.exception), (
            "invalid policy config.json: `weight` must be a number from 0 to 1, got 1.5; "
            "set `weight` to a number from 0 to 1, or leave it out for the default 0.5"))
        with self.assertRaisesRegex(PolicyError, r"^invalid policy config.json: `minFreeMiB` must be an integer "
                                                 r"of at least 0, got -1; set `minFreeMiB` to"):
            parse_config('{"minFreeMiB": -1}', FIELDS)
        with self.assertRaisesRegex(PolicyError, "`cap` must be an integer of at most 64, or null, got 65"):
            parse_config('{"cap": 65}', FIELDS)
        self.assertIsNone(parse_config('{"cap": null}', FIELDS)["cap"])

    def test_types_are_checked(self):
        cases = [
            ('{"minFreeMiB": 2.5}', "`minFreeMiB` must be an integer"),
            ('{"minFreeMiB": 2.0}', "write 2, without the decimal point"),
            ('{"minFreeMiB": "8"}', "`minFreeMiB` must be an integer"),
            ('{"weight": true}', "`weight` must be a number"),
            ('{"weight": null}', "`weight` must be a number from 0 to 1, got null"),
            ('{"spread": 1}', "`spread` must be a bool (true or false), got 1"),
            ('{"spread": "yes"}', "`spread` must be a bool"),
            ('{"zoneLabel": 3}', "`zoneLabel` must be a string, got 3"),
            ('{"nvlink": "always"}', '`nvlink` must be one of "prefer", "require", "ignore", got "always"'),
            ('{"nvlink": "Prefer"}', '`nvlink` must be one of'),
        ]
        for config, expected in cases:
            with self.assertRaises(PolicyError, msg=config) as e:
                parse_config(config, FIELDS)
            self.assertIn(expected, str(e.exception), config)
            self.assertTrue(str(e.exception).startswith("invalid policy config.json: "), config)

    def test_malformed_json_is_refused(self):
        for config, expected in [
            ("{", "invalid policy config.json: Expecting property name"),
            ("[1]", "expected a JSON object, got [1]"),
            ('"x"', "expected a JSON object"),
            ('{"weight": NaN}', "NaN is not JSON"),
            ('{"weight": 0, "weight": 1}', "duplicate field `weight`"),
        ]:
            with self.assertRaises(PolicyError, msg=config) as e:
                parse_config(config, FIELDS)
            self.assertIn(expected, str(e.exception), config)

    def test_the_older_call_form_still_works(self):
        defaults = {"preferNvlink": True}
        self.assertEqual(parse_config("  ", defaults), {"preferNvlink": True})
        self.assertEqual(parse_config('{"preferNvlink": false}', defaults), {"preferNvlink": False})
        with self.assertRaisesRegex(PolicyError, "must be a bool"):
            parse_config('{"preferNvlink": 1}', defaults)
        with self.assertRaisesRegex(PolicyError, "unknown field `preferNVLink`"):
            parse_config('{"preferNVLink": true}', defaults)

    def test_fields_are_declared_sensibly(self):
        with self.assertRaises(TypeError):
            Field(None)  # no type to take from the default
        with self.assertRaises(TypeError):
            Field("x", min=0)  # a range on a string
        with self.assertRaises(TypeError):
            Field(1, type=complex)
        self.assertEqual(repr(Field(0, type=int, min=0)), "Field(0, type=int, min=0)")


if __name__ == "__main__":
    unittest.main()
