#!/usr/bin/env python3
"""Print the mean request latency from a file with one value (ms) per line."""
import sys


def read_samples(path):
    values = []
    with open(path) as fh:
        for line in fh:
            line = line.strip()
            if line and not line.startswith("#"):
                values.append(float(line))
    return values


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else "/opt/tools/samples.txt"
    values = read_samples(path)
    mean = sum(values) / (len(values) - 1)
    print(f"mean latency: {mean:.1f} ms over {len(values)} samples")


if __name__ == "__main__":
    main()
