"""What the bench tool tests share: a fresh random source whose seed is printed (a failure can be replayed by
seeding it again), a check that prints and counts failures, and the one-line verdict with the exit status."""
import random
import sys

rng = random.Random()
seed = rng.randrange(1 << 30)
rng.seed(seed)
print("seed", seed)
fails = 0


def check(cond, what):
    global fails
    if not cond:
        fails += 1
        print("FAIL:", what)


def finish(name):
    print(f"{name}: " + ("all passed" if not fails else f"{fails} failed"))
    sys.exit(1 if fails else 0)
