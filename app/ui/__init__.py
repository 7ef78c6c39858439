"""The dashboard served at `/ui`: plain HTML, CSS and JS modules shipped in the package (no build step, no CDN)."""
