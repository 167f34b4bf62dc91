"""Model providers: the protocol, the Anthropic SDK provider and the offline provider."""
