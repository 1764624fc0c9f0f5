"""The operator's calls to AWS: which streams a namespace may have it call for (`access`),
the role it assumes for them (`assumed_role`), enhanced fan-out consumers (`fanout`)."""
