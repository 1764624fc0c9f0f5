"""`python -m streamconsumer.spark.jars DIR [COORDINATES...]`: fetch the Delta Lake jars
(plus any other Maven coordinates, and what they depend on) from Maven Central into DIR,
once, e.g. while building an image. Point STREAMCONSUMER_SPARK_JARS at DIR and sessions
load them from there; without it, they are fetched once into the user's cache."""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from xml.etree import ElementTree

log = logging.getLogger(__name__)

# Delta Lake 4.4 is built for Spark 4.2 (hence pyspark 4.2.x in the `spark` extra).
DELTA_PACKAGE = "io.delta:delta-spark_2.13:4.4.0"
# Where Spark's own resolver looks too; DEFAULT_ARTIFACT_REPOSITORY (a mirror) wins, as there.
MAVEN_CENTRAL = "https://repo1.maven.org/maven2/"
FETCH_LAYOUT = 2  # bump when fetch() keeps different jars, so caches are refilled
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "streamconsumer"


def cached() -> Path:
    """The Delta jars in the user's cache, fetched on first use. The fetch runs in a child
    process: a JVM's memory is fixed at launch, so the session must not reuse its JVM."""
    directory = CACHE / "spark-jars" / f"{DELTA_PACKAGE.replace(':', '_')}-{FETCH_LAYOUT}"
    if directory.is_dir():
        return directory
    log.warning("fetching the Delta Lake jars from Maven Central into %s (once)", directory)
    partial = directory.with_name(f"{directory.name}.partial-{os.getpid()}")
    fetched = subprocess.run(
        [sys.executable, "-m", "streamconsumer.spark.jars", str(partial)],
        capture_output=True,
        text=True,
        check=False,
    )
    if fetched.returncode != 0:
        shutil.rmtree(partial, ignore_errors=True)
        raise RuntimeError(f"fetching {DELTA_PACKAGE} failed:\n{fetched.stderr[-2000:]}")
    try:
        partial.rename(directory)  # only a complete fetch is ever used
    except OSError:  # another process finished first
        shutil.rmtree(partial, ignore_errors=True)
    return directory


def fetch(directory: Path, extra_packages: Sequence[str] = ()) -> list[Path]:
    """Resolves DELTA_PACKAGE (and `extra_packages`) with Spark's own Ivy and keeps the
    jars Spark does not already ship. Nothing the user has cached takes part."""
    from pyspark.sql import SparkSession

    directory.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="ivy-") as ivy:
        session = (
            SparkSession.builder.master("local[1]")
            .config("spark.jars.packages", ",".join([DELTA_PACKAGE, *extra_packages]))
            .config("spark.jars.ivy", ivy)
            .config("spark.jars.ivySettings", str(_ivy_settings(Path(ivy))))
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


def _ivy_settings(ivy: Path) -> Path:
    """Ivy settings whose only resolver is Maven Central. Spark's default chain asks the
    user's ~/.m2 first, and Ivy takes a module found there even when Maven left only its
    POM (as it does for a dependency it only read): the jar is then "not found" and the
    whole fetch fails, on exactly the machines that never fetched that jar."""
    settings = ElementTree.Element("ivysettings")
    ElementTree.SubElement(settings, "settings", defaultResolver="central")
    for lookup in ("sources", "javadoc"):  # as Spark's own settings: jars only
        ElementTree.SubElement(
            settings, "property", name=f"ivy.maven.lookup.{lookup}", value="false"
        )
    resolvers = ElementTree.SubElement(settings, "resolvers")
    ElementTree.SubElement(
        resolvers,
        "ibiblio",
        name="central",
        m2compatible="true",
        usepoms="true",
        root=os.environ.get("DEFAULT_ARTIFACT_REPOSITORY", MAVEN_CENTRAL),
    )
    path = ivy / "ivysettings.xml"
    ElementTree.ElementTree(settings).write(path, encoding="utf-8", xml_declaration=True)
    return path


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
    # The fetch needs a JVM of its own: a Spark Connect address or mode inherited from
    # the environment (a worker's SPARK_REMOTE, or what a Connect session sets) would make
    # the builder refuse a local master.
    for name in ("SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED"):
        os.environ.pop(name, None)
    malformed = [c for c in extra if c.count(":") != 2]
    if malformed:
        sys.exit(f"not Maven coordinates (group:artifact:version): {', '.join(malformed)}")
    packages = ", ".join([DELTA_PACKAGE, *extra])
    try:
        fetched = fetch(directory, extra)
    except RuntimeError as error:  # Spark's own output above (Ivy's report) says why
        sys.exit(f"fetching {packages} failed: {error}")
    print(f"{len(fetched)} jars for {packages} in {directory}")


if __name__ == "__main__":
    main()
