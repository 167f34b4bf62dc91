"""Memory in conversations: personal recall and writing, group memory, the episode former."""
