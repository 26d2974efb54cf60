"""Git plumbing on dulwich: the repository, objects, trees, the index and its
repairs, Git's lock files. Nothing outside `agentfs/store/` imports dulwich."""
