// The Annal console: see docs/decisions/0018-console.md.
document.getElementById("app").textContent = "Annal";
