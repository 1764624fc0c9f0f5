"""What runs for one StreamConsumer: the sans-I/O loop that decides what is due (`loop`),
the driver that turns it into jobs (`driver`, `jobs`), hosted on asyncio (`runner`) while
this replica leads (`consumers`); the consumers served (`registry`), the autoscaler's state
(`autoscaler`) and a consumer whose table cannot be loaded (`stalls`)."""
