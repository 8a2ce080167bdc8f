package handler

// validateFilter checks a subscription filter's syntax. The full grammar lives in
// libs/pubsubfilter; until it is merged, storage-core's CreateQueue (which applies the
// filter) is the check, and its INVALID_ARGUMENT reaches the client.
func validateFilter(string) error { return nil }
