"""Memory: the lesson's estimate, what vLLM's CPU engine will hold, and the peak measured on the estimate's basis."""
