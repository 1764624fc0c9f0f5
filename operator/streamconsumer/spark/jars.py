"""`python -m streamconsumer.spark.jars DIR`: fetch the Delta Lake jars (and what they
depend on) from Maven Central into DIR, once, e.g. while building an image. Point
STREAMCONSUMER_SPARK_JARS at DIR and sessions load them from there."""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

from streamconsumer.spark.session import DELTA_PACKAGE


def fetch(directory: Path) -> list[Path]:
    """Resolves DELTA_PACKAGE with Spark's own Ivy, then keeps only the jars."""
    from pyspark.sql import SparkSession

    directory.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="ivy-") as ivy:
        session = (
            SparkSession.builder.master("local[1]")
            .config("spark.jars.packages", DELTA_PACKAGE)
            .config("spark.jars.ivy", ivy)
            .config("spark.ui.enabled", "false")
            .getOrCreate()
        )
        session.stop()
        jars = sorted(Path(ivy, "jars").glob("*.jar"))
        if not jars:
            raise RuntimeError(f"Ivy resolved no jars for {DELTA_PACKAGE}")
        return [Path(shutil.copy2(jar, directory / jar.name)) for jar in jars]


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit("usage: python -m streamconsumer.spark.jars DIR")
    fetched = fetch(Path(sys.argv[1]))
    print(f"{len(fetched)} jars for {DELTA_PACKAGE} in {sys.argv[1]}")


if __name__ == "__main__":
    main()
