"""The permission gate's host side: approvals for agents' actions."""
