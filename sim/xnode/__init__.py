"""Cross-node KV: placement mechanics, page traffic, the network model and the page index codec."""
