"""TLS of the worker API: the CA and serving certificates (`tls`), the CA's Secret
(`ca_secret`), its bundle in every consumer's ConfigMap (`ca_upkeep`), the serving context
renewed in place (`serving`)."""
