"""The workers' objects: their manifests (`children`), applied and never one we do not own
(`reconcile`, `owned`), and whether their pods start (`worker_health`)."""
