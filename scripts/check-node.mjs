// Refuses to run the test suite on anything but Node 24 LTS: the npm-installed `node` devDependency must be first on PATH.
const major = Number(process.versions.node.split(".")[0]);
if (major !== 24) {
  console.error(
    `calbridge targets Node 24 LTS; this is Node ${process.versions.node}. Run through npm scripts (npm ci installs Node 24 as a devDependency).`,
  );
  process.exit(1);
}
console.log(`node ${process.versions.node}`);
