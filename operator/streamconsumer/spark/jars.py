"""`python -m streamconsumer.spark.jars DIR [COORDINATES...]`: fetch the Delta Lake jars
(plus any other Maven coordinates, and what they depend on) from Maven Central into DIR,
once, e.g. while building an image. Point STREAMCONSUMER_SPARK_JARS at DIR and sessions
load them from there."""

from __future__ import annotations

import re
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from streamconsumer.spark.session import DELTA_PACKAGE


def fetch(directory: Path, extra_packages: Sequence[str] = ()) -> list[Path]:
    """Resolves DELTA_PACKAGE (and `extra_packages`) with Spark's own Ivy and keeps the
    jars Spark does not already ship."""
    from pyspark.sql import SparkSession

    directory.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="ivy-") as ivy:
        session = (
            SparkSession.builder.master("local[1]")
            .config("spark.jars.packages", ",".join([DELTA_PACKAGE, *extra_packages]))
            .config("spark.jars.ivy", ivy)
            .config("spark.ui.enabled", "false")
            .getOrCreate()
        )
        session.stop()
        resolved = sorted(Path(ivy, "jars").glob("*.jar"))
        if not resolved:
            raise RuntimeError(f"Ivy resolved no jars for {DELTA_PACKAGE}")
        # Delta's pom also pulls Hadoop, Parquet, Jackson, log4j... which Spark ships in
        # newer versions; a second copy on the classpath would mix versions.
        bundled = {_artifact(jar.name) for jar in spark_jars().glob("*.jar")}
        kept = [jar for jar in resolved if _artifact(jar.name.split("_", 1)[-1]) not in bundled]
        return [Path(shutil.copy2(jar, directory / jar.name)) for jar in kept]


def spark_jars() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent / "jars"


def _artifact(jar_name: str) -> str:
    """`hadoop-client-api-3.4.2.jar` -> `hadoop-client-api`."""
    return re.sub(r"-\d[^-]*(-[A-Za-z0-9.]+)*\.jar$", "", jar_name)


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit("usage: python -m streamconsumer.spark.jars DIR [group:artifact:version...]")
    directory, extra = Path(sys.argv[1]), sys.argv[2:]
    malformed = [c for c in extra if c.count(":") != 2]
    if malformed:
        sys.exit(f"not Maven coordinates (group:artifact:version): {', '.join(malformed)}")
    fetched = fetch(directory, extra)
    print(f"{len(fetched)} jars for {', '.join([DELTA_PACKAGE, *extra])} in {directory}")


if __name__ == "__main__":
    main()
