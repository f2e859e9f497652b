#!/usr/bin/python3
"""Record CPython's random.Random outputs for loader::PythonRandom: python_random.json.

Each case seeds one generator with random.Random(seed) (an int; a negative one seeds as its
absolute value) and applies a fixed list of operations in order, recording each result, so the
test checks the seeding, every method and how their draws interleave on one stream:

  getrandbits k      rng.getrandbits(k), k in 0..64 (and beyond 32: several 32-bit words)
  random             rng.random(), recorded as float.hex and as a JSON number
  randbelow n        rng._randbelow(n) (what shuffle/choice/sample/randrange use)
  randint a b        rng.randint(a, b)
  shuffle n          x = list(range(n)); rng.shuffle(x); x
  choice n           rng.choice(range(n)) -- several in a row
  sample n k         rng.sample(range(n), k) (both of CPython's paths: pool and set)
  skip n             n calls of getrandbits(32), not recorded, to cross state refills (624 words)

    /usr/bin/python3 make_python_random.py > python_random.json
"""
import json, random, sys

SEEDS = [0, 1, 42, -42, 2**31 + 5, 2**32 - 1, 2**32, 2**32 + 1, 123456789, 2**53 + 7, 2**63, 2**64 - 1,
         123456789012345678901234567890, 2**96 + 2**64 + 3]


def ops_for(seed_index):
    ops = [["getrandbits", 32]] * 3
    ops += [["getrandbits", k] for k in (0, 1, 7, 31, 32, 33, 53, 63, 64)]
    ops += [["random"]] * 3
    ops += [["randbelow", n] for n in (1, 1, 2, 3, 5, 7, 10, 100, 1000, 2**31, 2**32 - 1, 2**32, 2**32 + 1,
                                         2**53 + 1, 2**63 - 25, 2**63, 2**64 - 1)]
    ops += [["randint", -5, 5], ["randint", 0, 0], ["randint", 10, 2**40]]
    ops += [["shuffle", n] for n in (0, 1, 2, 3, 10, 100)]
    ops += [["choice", n] for n in (1, 1, 2, 3, 17, 1000, 70000)]
    ops += [["sample", n, k] for n, k in ((5, 0), (5, 5), (10, 3), (21, 6), (30, 5), (30, 10), (100, 10),
                                          (1000, 50), (100000, 7))]
    ops += [["skip", 600 + 37 * seed_index], ["getrandbits", 32], ["random"], ["shuffle", 20]]
    return ops


def apply(rng, op):
    name = op[0]
    if name == "getrandbits":
        return rng.getrandbits(op[1])
    if name == "random":
        x = rng.random()
        return {"hex": x.hex(), "value": x}
    if name == "randbelow":
        return rng._randbelow(op[1])
    if name == "randint":
        return rng.randint(op[1], op[2])
    if name == "shuffle":
        x = list(range(op[1]))
        rng.shuffle(x)
        return x
    if name == "choice":
        return rng.choice(range(op[1]))
    if name == "sample":
        return rng.sample(range(op[1]), op[2])
    if name == "skip":
        for _ in range(op[1]):
            rng.getrandbits(32)
        return None
    raise ValueError(name)


def main():
    cases = []
    for i, seed in enumerate(SEEDS):
        rng = random.Random(seed)
        ops = []
        for op in ops_for(i):
            ops.append({"op": op, "result": apply(rng, op)})
        # The seed is also a decimal string: JSON readers need not handle integers beyond 64 bits.
        cases.append({"seed": str(seed), "ops": ops})
    json.dump({"recorded_with": "CPython " + sys.version.split()[0] + " random.Random", "cases": cases},
              sys.stdout, separators=(",", ":"))
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
