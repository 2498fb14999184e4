"""Looking at a study: its images (windowed, enlarged, the prior beside it) as the page
shows them."""
