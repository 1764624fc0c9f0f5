"""The release's own steps (CONTRIBUTING.md, "Releasing"): what .github/workflows/release.yml
runs, and `make release-dry-run` runs here. Standard library only, so a bare runner can
run `python -m release.version`."""
