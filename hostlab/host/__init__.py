"""The machine the host tasks run on: the tools found on PATH (`tools`), what is printed (`console`), which track this
host is and what it lacks (`detect`), the host packages the set-up script installs per release (`packages`), the
Docker engine with a BuildKit-capable CLI (`engine`), where the lab's runs land (`runs`), environment variables set
for a block (`environ`) and work that processes take turns at (`turns`). The bottom of the host side: imports nothing
else of hostlab."""
