"""Stream sources, one module per kind behind the small interface in `base` (the way
KEDA keeps one file per scaler). Kinesis is the first; DynamoDB Streams comes next."""
